//! The issued items of a state by key, with O(1) lookup: per host thread, a window over its ops from the oldest op
//! that still has an item. A pipeline's hosts issue every op up front, so a state holds tens of thousands of items;
//! looking them up in one ordered map was a sixth of a random walk (issue 8, "random walk at 1 M steps/s").
//!
//! Iteration is in key order (thread, op, sub), as the ordered map's was, and equality, hashing and serialization
//! depend on the items alone (not on how the window was trimmed), so states compare and hash as before.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use super::ids::{ItemKey, ThreadId};
use super::state::Item;

/// One op's items: the one with `sub` 0 and, for a group end that launches on several communicators (N4), the others
/// in `sub` order. Boxed, so that the slots of ops without items (and the window's spare capacity) stay small.
#[derive(Clone, Debug, Default)]
struct Slot {
    first: Option<Box<(ItemKey, Item)>>,
    more: Vec<(ItemKey, Item)>,
}

impl Slot {
    fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &(ItemKey, Item)> {
        self.first.as_deref().into_iter().chain(self.more.iter())
    }

    fn get(&self, sub: u16) -> Option<&(ItemKey, Item)> {
        if sub == 0 {
            self.first.as_deref()
        } else {
            self.more.binary_search_by_key(&sub, |(k, _)| k.sub).ok().map(|i| &self.more[i])
        }
    }

    fn get_mut(&mut self, sub: u16) -> Option<&mut (ItemKey, Item)> {
        if sub == 0 {
            self.first.as_deref_mut()
        } else {
            self.more.binary_search_by_key(&sub, |(k, _)| k.sub).ok().map(|i| &mut self.more[i])
        }
    }
}

/// One thread's items: `slots[i]` holds those of op `base + i`.
#[derive(Clone, Debug, Default)]
struct Window {
    base: u32,
    slots: VecDeque<Slot>,
}

impl Window {
    fn slot(&self, op: u32) -> Option<&Slot> {
        op.checked_sub(self.base).and_then(|i| self.slots.get(i as usize))
    }

    fn slot_mut(&mut self, op: u32) -> Option<&mut Slot> {
        op.checked_sub(self.base).and_then(|i| self.slots.get_mut(i as usize))
    }

    /// Drops empty slots at both ends.
    fn trim(&mut self) {
        while self.slots.front().is_some_and(Slot::is_empty) {
            self.slots.pop_front();
            self.base += 1;
        }
        while self.slots.back().is_some_and(Slot::is_empty) {
            self.slots.pop_back();
        }
    }
}

/// The items of a state by [`ItemKey`] (module docs). The map API of the ordered map it replaces: `get`, `get_mut`,
/// `insert`, `remove`, `contains_key`, `iter`, `values`, `len`, indexing, and `range_from` / `subs` for the two
/// range queries the model makes.
#[derive(Clone, Debug, Default)]
pub struct ItemMap {
    threads: Vec<Window>,
    len: usize,
}

impl ItemMap {
    /// An empty map.
    pub fn new() -> ItemMap {
        ItemMap::default()
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no item.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The item under `k`.
    pub fn get(&self, k: &ItemKey) -> Option<&Item> {
        self.threads.get(k.thread as usize)?.slot(k.op)?.get(k.sub).map(|(_, i)| i)
    }

    /// The item under `k`, to change it.
    pub fn get_mut(&mut self, k: &ItemKey) -> Option<&mut Item> {
        self.threads.get_mut(k.thread as usize)?.slot_mut(k.op)?.get_mut(k.sub).map(|(_, i)| i)
    }

    /// Whether an item is under `k`.
    pub fn contains_key(&self, k: &ItemKey) -> bool {
        self.get(k).is_some()
    }

    /// Puts `item` under `k`; returns the item that was there.
    pub fn insert(&mut self, k: ItemKey, item: Item) -> Option<Item> {
        let t = k.thread as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, Window::default);
        }
        let w = &mut self.threads[t];
        if w.slots.is_empty() {
            w.base = k.op;
        }
        while k.op < w.base {
            w.slots.push_front(Slot::default());
            w.base -= 1;
        }
        let i = (k.op - w.base) as usize;
        if w.slots.len() <= i {
            w.slots.resize_with(i + 1, Slot::default);
        }
        let slot = &mut w.slots[i];
        let old = if k.sub == 0 {
            slot.first.replace(Box::new((k, item))).map(|b| b.1)
        } else {
            match slot.more.binary_search_by_key(&k.sub, |(k, _)| k.sub) {
                Ok(j) => Some(std::mem::replace(&mut slot.more[j].1, item)),
                Err(j) => {
                    slot.more.insert(j, (k, item));
                    None
                }
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Takes the item under `k` out.
    pub fn remove(&mut self, k: &ItemKey) -> Option<Item> {
        let w = self.threads.get_mut(k.thread as usize)?;
        let slot = w.slot_mut(k.op)?;
        let old = if k.sub == 0 {
            slot.first.take().map(|b| b.1)
        } else {
            let j = slot.more.binary_search_by_key(&k.sub, |(k, _)| k.sub).ok()?;
            Some(slot.more.remove(j).1)
        };
        if old.is_some() {
            self.len -= 1;
            w.trim();
        }
        old
    }

    /// Drops the item under `k` where it lies (no move out of its box, which [`Self::remove`] makes); returns
    /// whether there was one. Forgetting drops thousands of items a pass (issue 9).
    pub fn discard(&mut self, k: &ItemKey) -> bool {
        let Some(w) = self.threads.get_mut(k.thread as usize) else { return false };
        let Some(slot) = w.slot_mut(k.op) else { return false };
        let found = if k.sub == 0 {
            slot.first.take().is_some()
        } else {
            match slot.more.binary_search_by_key(&k.sub, |(k, _)| k.sub) {
                Ok(j) => {
                    slot.more.remove(j);
                    true
                }
                Err(_) => false,
            }
        };
        if found {
            self.len -= 1;
            w.trim();
        }
        found
    }

    /// Every (key, item), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&ItemKey, &Item)> + '_ {
        self.threads.iter().flat_map(|w| w.slots.iter().flat_map(Slot::iter)).map(|(k, i)| (k, i))
    }

    /// Every item, in key order.
    pub fn values(&self) -> impl Iterator<Item = &Item> + '_ {
        self.iter().map(|(_, i)| i)
    }

    /// The items of `from`'s thread from `from` on, in key order (the ordered map's `range(from..)`, cut at the end of
    /// the thread, which is where every caller stopped).
    pub fn range_from(&self, from: ItemKey) -> impl Iterator<Item = (&ItemKey, &Item)> + '_ {
        let w = self.threads.get(from.thread as usize);
        let skip = w.map_or(0, |w| from.op.saturating_sub(w.base) as usize);
        w.into_iter().flat_map(move |w| w.slots.iter().skip(skip).flat_map(Slot::iter)).filter(move |(k, _)| *k >= from).map(|(k, i)| (k, i))
    }

    /// The items of op `op` of thread `thread`, in `sub` order.
    pub fn subs(&self, thread: ThreadId, op: u32) -> impl Iterator<Item = (&ItemKey, &Item)> + '_ {
        self.threads.get(thread as usize).and_then(|w| w.slot(op)).into_iter().flat_map(Slot::iter).map(|(k, i)| (k, i))
    }
}

impl std::ops::Index<&ItemKey> for ItemMap {
    type Output = Item;

    /// Panics if no item is under the key (a caller bug: keys come from the same state).
    fn index(&self, k: &ItemKey) -> &Item {
        self.get(k).unwrap_or_else(|| panic!("no item {k:?}"))
    }
}

impl<'a> IntoIterator for &'a ItemMap {
    type Item = (&'a ItemKey, &'a Item);
    type IntoIter = Box<dyn Iterator<Item = (&'a ItemKey, &'a Item)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl PartialEq for ItemMap {
    fn eq(&self, other: &ItemMap) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for ItemMap {}

impl Hash for ItemMap {
    /// As an ordered map hashes: the length, then every (key, item) in order.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len);
        for (k, i) in self.iter() {
            k.hash(state);
            i.hash(state);
        }
    }
}

impl Serialize for ItemMap {
    /// As the ordered map it replaces: a map from key to item, in key order.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for ItemMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ItemMap, D::Error> {
        let m = BTreeMap::<ItemKey, Item>::deserialize(d)?;
        let mut out = ItemMap::new();
        for (k, i) in m {
            out.insert(k, i);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(thread: u32, op: u32, sub: u16) -> ItemKey {
        ItemKey { thread, op, sub }
    }

    /// Random inserts and removes keep the same contents, order, length, equality and hash as an ordered map.
    #[test]
    fn behaves_as_an_ordered_map() {
        use std::collections::hash_map::DefaultHasher;
        let item = |n: u32| Item {
            kind: crate::semantics::state::ItemKind::Work,
            streams: smallvec::smallvec![crate::program::StreamRef { rank: 0, index: 0 }],
            deps: smallvec::smallvec![key(n, n, 0)],
            waits: Default::default(),
            clock: Default::default(),
            status: crate::semantics::state::ItemStatus::Pending,
            blocks: Default::default(),
        };
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut m, mut b) = (ItemMap::new(), BTreeMap::new());
        for step in 0..20_000u32 {
            let k = key((next() % 4) as u32, (next() % 64) as u32, if next() % 5 == 0 { (next() % 3) as u16 } else { 0 });
            if next() % 3 == 0 {
                assert_eq!(m.remove(&k), b.remove(&k), "step {step}");
            } else {
                assert_eq!(m.insert(k, item(step)), b.insert(k, item(step)), "step {step}");
            }
            assert_eq!(m.len(), b.len());
            assert_eq!(m.get(&k), b.get(&k));
        }
        assert!(m.iter().eq(b.iter()), "key order");
        let from = key(2, 30, 0);
        assert!(m.range_from(from).eq(b.range(from..).take_while(|(k, _)| k.thread == 2)));
        assert!(m.subs(1, 10).eq(b.range(key(1, 10, 0)..=key(1, 10, u16::MAX))));
        // Equal contents built in another order are equal and hash alike.
        let mut m2 = ItemMap::new();
        for (k, i) in b.iter().rev() {
            m2.insert(*k, i.clone());
        }
        assert_eq!(m, m2);
        let h = |m: &ItemMap| {
            let mut s = DefaultHasher::new();
            m.hash(&mut s);
            s.finish()
        };
        assert_eq!(h(&m), h(&m2));
        // Serialized as the ordered map was.
        assert_eq!(ron::to_string(&m).unwrap(), ron::to_string(&b).unwrap());
        let back: ItemMap = ron::from_str(&ron::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}

//! Vector clocks for happens-before (MODEL.md "Happens-before and races"). One component per agent: every host
//! thread and every stream of the program.
//!
//! A clock is a shared, immutable *base* vector plus a small sorted *overlay* of components that moved past it, so
//! that the common operations of a long run cost O(1) instead of O(agents) (issue 9, "scale"): a thread or stream
//! ticking its own component writes the overlay; copying a clock (an item's issue, start and end clocks, an access's
//! start) shares the base; a join where one side's base is known to be dominated by the other's merges overlays.
//! Only a join that brings genuinely new knowledge from another agent (an event wait, a recv completing, a
//! synchronize) builds a new base, in O(agents). Each base remembers a few bases it is known to dominate (the ones it
//! was joined from), which is what makes "known to be dominated" cheap to decide.
//!
//! Equality, hashing, ordering and serialization look at the values only, never at how they are split between base
//! and overlay, so two states that hold the same clocks are equal whatever path built them (the explorer merges
//! them) and the same input gives the same bytes out.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most components an overlay holds before they are folded into a new base.
const OVERLAY: usize = 6;
/// Most base ids a base remembers as dominated.
const DOMINATES: usize = 8;

/// Ids of bases: only a hint for speed (which bases are known to be dominated), never part of a clock's value.
static NEXT_BASE: AtomicU64 = AtomicU64::new(1);

/// An immutable vector of components, shared by every clock built on it.
#[derive(Debug)]
struct Base {
    id: u64,
    /// Whether every component is zero (dominated by every base).
    zero: bool,
    /// Ids of bases whose every component is at most this one's (0 = unused slot).
    dominates: [u64; DOMINATES],
    v: Box<[u32]>,
}

impl Base {
    fn new(v: Box<[u32]>, dominates: [u64; DOMINATES]) -> Arc<Base> {
        let zero = v.iter().all(|&x| x == 0);
        Arc::new(Base {
            id: NEXT_BASE.fetch_add(1, AtomicOrdering::Relaxed),
            zero,
            dominates,
            v,
        })
    }

    /// Whether every component of `self` is known (without looking at the values) to be at most `other`'s.
    fn known_le(&self, other: &Base) -> bool {
        self.zero || self.id == other.id || other.dominates.contains(&self.id)
    }
}

/// A vector clock: component `i` counts the events of agent `i` that happen before (or are) this point. Cloning
/// is O(1); see the module docs for the costs of the other operations.
#[derive(Clone)]
pub struct VClock {
    base: Arc<Base>,
    /// Components past the base, sorted by agent, each strictly greater than the base's: `(agent, time)`.
    overlay: [(u32, u32); OVERLAY],
    len: u8,
}

impl VClock {
    /// The zero clock for `agents` agents.
    pub fn new(agents: usize) -> VClock {
        VClock::from_vec(vec![0; agents])
    }

    /// The clock with these components, one per agent.
    pub fn from_vec(v: Vec<u32>) -> VClock {
        VClock {
            base: Base::new(v.into_boxed_slice(), [0; DOMINATES]),
            overlay: [(0, 0); OVERLAY],
            len: 0,
        }
    }

    /// Number of agents.
    pub fn agents(&self) -> usize {
        self.base.v.len()
    }

    fn overlay(&self) -> &[(u32, u32)] {
        &self.overlay[..self.len as usize]
    }

    /// Local time of `agent` in this clock. Panics if `agent` is out of range (a caller bug: agents come from the
    /// program's tables).
    pub fn get(&self, agent: usize) -> u32 {
        match self.overlay().iter().find(|(a, _)| *a as usize == agent) {
            Some(&(_, t)) => t,
            None => self.base.v[agent],
        }
    }

    /// The components in agent order.
    pub fn values(&self) -> impl Iterator<Item = u32> + '_ {
        let mut over = self.overlay().iter().peekable();
        self.base
            .v
            .iter()
            .enumerate()
            .map(move |(i, &x)| match over.peek() {
                Some(&&(a, t)) if a as usize == i => {
                    over.next();
                    t
                }
                _ => x,
            })
    }

    /// The components in agent order, as a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut v = self.base.v.to_vec();
        for &(a, t) in self.overlay() {
            v[a as usize] = t;
        }
        v
    }

    /// Raises component `agent` to at least `time`.
    fn raise(&mut self, agent: u32, time: u32) {
        if time <= self.base.v[agent as usize] {
            return;
        }
        let n = self.len as usize;
        match self.overlay[..n].binary_search_by_key(&agent, |&(a, _)| a) {
            Ok(i) => self.overlay[i].1 = self.overlay[i].1.max(time),
            Err(i) if n < OVERLAY => {
                self.overlay.copy_within(i..n, i + 1);
                self.overlay[i] = (agent, time);
                self.len += 1;
            }
            Err(_) => {
                // Full: fold the overlay and the new component into a new base that dominates the old one.
                let mut v = self.to_vec();
                v[agent as usize] = time;
                let mut dominates = [0; DOMINATES];
                dominates[0] = self.base.id;
                dominates[1..].copy_from_slice(&self.base.dominates[..DOMINATES - 1]);
                self.base = Base::new(v.into_boxed_slice(), dominates);
                self.len = 0;
            }
        }
    }

    /// Pointwise maximum, in place. O(overlay) when one base is known to dominate the other, O(agents) otherwise.
    pub fn join(&mut self, other: &VClock) {
        if other.base.known_le(&self.base) {
            for &(a, t) in other.overlay() {
                self.raise(a, t);
            }
            return;
        }
        if self.base.known_le(&other.base) {
            let mine = self.overlay;
            let n = self.len as usize;
            self.base = other.base.clone();
            self.overlay = other.overlay;
            self.len = other.len;
            for &(a, t) in &mine[..n] {
                self.raise(a, t);
            }
            return;
        }
        // The dense case (a join of 3,000 components is the inner loop of a 1,024-rank pipeline), in straight passes
        // the compiler vectorizes. First without allocating: if the other base is below ours, its overlay is all it
        // can add. Otherwise one pass builds the pointwise maximum of the bases, then both overlays are raised into it
        // (an overlay's values exceed its own base's, not necessarily the other base's).
        let base_grew = self.base.v.iter().zip(other.base.v.iter()).fold(false, |g, (&x, &y)| g | (y > x));
        if !base_grew {
            for &(a, t) in other.overlay() {
                self.raise(a, t);
            }
            return;
        }
        let mut v: Vec<u32> = self.base.v.iter().zip(other.base.v.iter()).map(|(&x, &y)| x.max(y)).collect();
        for &(a, t) in self.overlay().iter().chain(other.overlay()) {
            let x = &mut v[a as usize];
            *x = (*x).max(t);
        }
        // The new base dominates both: remember them (and what they dominate) for later joins.
        let mut dominates = [0; DOMINATES];
        let known = [self.base.id, other.base.id].into_iter().chain(
            self.base
                .dominates
                .iter()
                .zip(&other.base.dominates)
                .flat_map(|(a, b)| [*a, *b])
                .filter(|&x| x != 0),
        );
        for (slot, id) in dominates.iter_mut().zip(known) {
            *slot = id;
        }
        self.base = Base::new(v.into_boxed_slice(), dominates);
        self.len = 0;
    }

    /// Advances agent `agent` by one and returns its new local time.
    pub fn tick(&mut self, agent: usize) -> u32 {
        let t = self.get(agent) + 1;
        self.raise(agent as u32, t);
        t
    }

    /// Approximate heap bytes this clock keeps alive, its base shared fairly among the clocks that hold it (for
    /// memory budgets).
    pub fn heap_bytes(&self) -> usize {
        (std::mem::size_of::<Base>() + self.base.v.len() * std::mem::size_of::<u32>())
            / Arc::strong_count(&self.base)
    }
}

impl std::fmt::Debug for VClock {
    /// The components, as the clock printed before it had a base and an overlay (`VClock([0, 2, 1])`): debug output
    /// feeds determinism checks, so it must not show base ids.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("VClock").field(&self.to_vec()).finish()
    }
}

impl Default for VClock {
    fn default() -> VClock {
        VClock::new(0)
    }
}

impl PartialEq for VClock {
    fn eq(&self, other: &VClock) -> bool {
        if Arc::ptr_eq(&self.base, &other.base) && self.len == other.len {
            return self.overlay() == other.overlay();
        }
        self.agents() == other.agents() && self.values().eq(other.values())
    }
}

impl Eq for VClock {}

impl Hash for VClock {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `Vec<u32>` hashes: the length, then the components.
        state.write_usize(self.agents());
        for x in self.values() {
            x.hash(state);
        }
    }
}

impl Ord for VClock {
    /// Lexicographic over the components (as `Vec<u32>` orders).
    fn cmp(&self, other: &VClock) -> Ordering {
        self.values().cmp(other.values())
    }
}

impl PartialOrd for VClock {
    fn partial_cmp(&self, other: &VClock) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The serialized form: the components, as the clock was written before it had a base and an overlay.
#[derive(Serialize, Deserialize)]
#[serde(rename = "VClock")]
struct Repr(Vec<u32>);

impl Serialize for VClock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Repr(self.to_vec()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for VClock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<VClock, D::Error> {
        Repr::deserialize(d).map(|r| VClock::from_vec(r.0))
    }
}

/// One event of one agent: `(agent, local time)`. Event `e` happens before a point with clock `c` iff
/// `c[e.agent] >= e.time`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Epoch {
    pub agent: u32,
    pub time: u32,
}

impl Epoch {
    /// Whether this event happens before (or is) the point with clock `c`.
    pub fn happens_before(self, c: &VClock) -> bool {
        c.get(self.agent as usize) >= self.time
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash(c: &VClock) -> u64 {
        let mut h = DefaultHasher::new();
        c.hash(&mut h);
        h.finish()
    }

    #[test]
    fn join_and_epochs() {
        let mut a = VClock::new(2);
        let t = a.tick(0);
        let e = Epoch { agent: 0, time: t };
        let mut b = VClock::new(2);
        b.tick(1);
        assert!(!e.happens_before(&b));
        b.join(&a);
        assert!(e.happens_before(&b));
        assert_eq!(b.to_vec(), vec![1, 1]);
    }

    /// Random ticks and joins over a few clocks agree with plain vectors in value, equality, order and hash,
    /// whichever way base and overlay split the values (more ticks than the overlay holds, joins of unrelated and
    /// of dominated bases).
    #[test]
    fn agrees_with_plain_vectors() {
        let agents = 9;
        let mut clocks: Vec<VClock> = (0..5).map(|_| VClock::new(agents)).collect();
        let mut plain: Vec<Vec<u32>> = vec![vec![0; agents]; 5];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m) as usize
        };
        for _ in 0..20_000 {
            let (i, j, a) = (next(5), next(5), next(agents as u64));
            match next(4) {
                0 | 1 => {
                    let t = clocks[i].tick(a);
                    plain[i][a] += 1;
                    assert_eq!(t, plain[i][a]);
                }
                2 => {
                    let o = clocks[j].clone();
                    clocks[i].join(&o);
                    let o = plain[j].clone();
                    plain[i]
                        .iter_mut()
                        .zip(o)
                        .for_each(|(x, y)| *x = (*x).max(y));
                }
                _ => {
                    clocks[i] = clocks[j].clone();
                    plain[i] = plain[j].clone();
                }
            }
            assert_eq!(clocks[i].to_vec(), plain[i]);
            assert_eq!(clocks[i].values().collect::<Vec<_>>(), plain[i]);
            for k in 0..5 {
                assert_eq!(clocks[i] == clocks[k], plain[i] == plain[k]);
                assert_eq!(clocks[i].cmp(&clocks[k]), plain[i].cmp(&plain[k]));
                if plain[i] == plain[k] {
                    assert_eq!(hash(&clocks[i]), hash(&clocks[k]));
                }
            }
            let rebuilt = VClock::from_vec(plain[i].clone());
            assert_eq!(format!("{:?}", rebuilt), format!("{:?}", clocks[i]));
            assert_eq!(hash(&rebuilt), hash(&clocks[i]));
            assert_eq!(rebuilt, clocks[i]);
        }
    }

    #[test]
    fn serializes_as_the_components() {
        let mut c = VClock::new(3);
        c.tick(2);
        let text = ron::to_string(&c).unwrap();
        assert_eq!(text, "([0,0,1])");
        let back: VClock = ron::from_str(&text).unwrap();
        assert_eq!(back, c);
    }
}

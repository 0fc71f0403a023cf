//! Vector clocks for happens-before (MODEL.md "Happens-before and races"). One component per agent: every host
//! thread and every stream of the program.

use serde::{Deserialize, Serialize};

/// A vector clock: component `i` counts the events of agent `i` that happen before (or are) this point.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct VClock(pub Vec<u32>);

impl VClock {
    /// The zero clock for `agents` agents.
    pub fn new(agents: usize) -> VClock {
        VClock(vec![0; agents])
    }

    /// Pointwise maximum, in place.
    pub fn join(&mut self, other: &VClock) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = (*a).max(*b);
        }
    }

    /// Advances agent `agent` by one and returns its new local time.
    pub fn tick(&mut self, agent: usize) -> u32 {
        self.0[agent] += 1;
        self.0[agent]
    }

    /// Local time of `agent` in this clock.
    pub fn get(&self, agent: usize) -> u32 {
        self.0[agent]
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
        c.0[self.agent as usize] >= self.time
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(b.0, vec![1, 1]);
    }
}

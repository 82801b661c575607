//! Failed states, remembered so that a search meeting the same state again (reached by
//! placing the items below it in another order) backs out at once.
//!
//! A state is the set of unplaced items with each one's floor; the search below a node
//! depends only on that, on the node's offset and on the rank of the item placed last.
//! Raising the offset or the rank only removes candidates and tightens the section
//! check, so a state that failed at `(offset, rank)` fails at every pair at or above
//! it. The table keeps, per state, the lowest such pair seen to fail.
//!
//! States are named by a 128-bit Zobrist-style fingerprint kept up to date as floors
//! change (two additions per change, no pass over the items): 64 bits pick the slot, 64
//! bits check it. A fingerprint collision could only make the search skip a subtree;
//! it never makes a placement invalid. The table is direct-mapped and fixed in size:
//! a new failure overwrites the slot, so memory stays bounded and the search stays
//! deterministic.

/// The fingerprint of a set of (item, floor) pairs, updated incrementally.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Fingerprint {
    lo: u64,
    hi: u64,
}

impl Fingerprint {
    /// Adds the pair (item, `floor`) to the set; `seed` is the item's [`seed`].
    pub fn add(&mut self, seed: u64, floor: u64) {
        let (lo, hi) = pair_hash(seed, floor);
        self.lo = self.lo.wrapping_add(lo);
        self.hi = self.hi.wrapping_add(hi);
    }

    /// Removes the pair (item, `floor`) from the set; `seed` is the item's [`seed`].
    pub fn remove(&mut self, seed: u64, floor: u64) {
        let (lo, hi) = pair_hash(seed, floor);
        self.lo = self.lo.wrapping_sub(lo);
        self.hi = self.hi.wrapping_sub(hi);
    }
}

impl Fingerprint {
    /// This fingerprint combined with another (a different state for every other).
    pub fn with(self, other: Fingerprint) -> Fingerprint {
        Fingerprint {
            lo: self.lo ^ mix(other.lo ^ 0x2545_F491_4F6C_DD1D),
            hi: self.hi ^ mix(other.hi.rotate_left(29)),
        }
    }
}

/// The item's well-mixed seed (computed once per item; [`Fingerprint`] takes it).
pub(super) fn seed(item: usize) -> u64 {
    mix(item as u64 ^ 0xD6E8_FEB8_6659_FD93)
}

/// Two independent 64-bit hashes of an (item, floor) pair: a multiply folds the floor
/// into the item's seed (cheap: the search updates the fingerprint once per floor
/// change).
fn pair_hash(seed: u64, floor: u64) -> (u64, u64) {
    let lo = (floor ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let hi = (floor.wrapping_add(seed.rotate_left(32))).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (lo ^ (lo >> 29), hi ^ (hi >> 31))
}

/// SplitMix64's finaliser: a bijection that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Words per slot: the check half of the fingerprint, the offset, and the rank plus
/// one (0: an empty slot).
const SLOT_WORDS: usize = 3;

/// A fixed-size table of failed states, each slot the lowest (offset, rank) at which
/// its state was seen to fail. The slots are plain words, all zero when empty, so the
/// table comes from zeroed memory: the pages a short search never touches cost
/// nothing.
#[derive(Debug, Clone)]
pub(super) struct FailedStates {
    words: Vec<u64>,
    mask: usize,
    /// False for a table that remembers nothing ([`FailedStates::disabled`]).
    enabled: bool,
    /// How many lookups found a failed state (for measurements and tests).
    pub hits: u64,
}

impl FailedStates {
    /// A table with room for about `items * 1024` states (a power of two between 1,024
    /// and 262,144 slots of 24 bytes: 6 MiB at most).
    pub fn for_items(items: usize) -> FailedStates {
        let slots = items
            .saturating_mul(1024)
            .clamp(1 << 10, 1 << 18)
            .next_power_of_two();
        FailedStates {
            words: vec![0; slots * SLOT_WORDS],
            mask: slots - 1,
            enabled: true,
            hits: 0,
        }
    }

    /// A table that remembers nothing (to measure, and test, what the table earns).
    pub fn disabled() -> FailedStates {
        FailedStates {
            enabled: false,
            ..FailedStates::for_items(0)
        }
    }

    /// The words of the slot for `state`.
    fn slot(&self, state: Fingerprint) -> usize {
        (state.lo as usize & self.mask) * SLOT_WORDS
    }

    /// Whether the slot at `at` holds `state` failed at or below (offset, rank).
    fn holds(&self, at: usize, state: Fingerprint, offset: u64, rank: u32) -> bool {
        let (check, low, rank_plus_one) = (self.words[at], self.words[at + 1], self.words[at + 2]);
        rank_plus_one != 0
            && check == state.hi
            && (low, rank_plus_one - 1) <= (offset, u64::from(rank))
    }

    /// Whether the state failed before at an (offset, rank) at or below this one.
    pub fn known_to_fail(&mut self, state: Fingerprint, offset: u64, rank: u32) -> bool {
        let hit = self.enabled && self.holds(self.slot(state), state, offset, rank);
        if hit {
            self.hits += 1;
        }
        hit
    }

    /// Records that the state failed at (offset, rank).
    pub fn record(&mut self, state: Fingerprint, offset: u64, rank: u32) {
        let at = self.slot(state);
        if !self.enabled || self.holds(at, state, offset, rank) {
            return;
        }
        self.words[at] = state.hi;
        self.words[at + 1] = offset;
        self.words[at + 2] = u64::from(rank) + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_ignores_the_order_pairs_arrive_in() {
        let (three, five) = (seed(3), seed(5));
        let mut a = Fingerprint::default();
        a.add(three, 10);
        a.add(five, 0);
        let mut b = Fingerprint::default();
        b.add(five, 0);
        b.add(three, 7);
        b.remove(three, 7);
        b.add(three, 10);
        assert_eq!(a, b);
        let mut c = a;
        c.remove(five, 0);
        c.add(five, 1);
        assert_ne!(a, c);
        let mut swapped = Fingerprint::default();
        swapped.add(three, 0);
        swapped.add(five, 10);
        assert_ne!(a, swapped);
    }

    #[test]
    fn a_state_failed_low_is_known_to_fail_higher_but_not_lower() {
        let mut table = FailedStates::for_items(4);
        let mut state = Fingerprint::default();
        state.add(seed(1), 8);
        table.record(state, 8, 2);
        assert!(table.known_to_fail(state, 8, 2));
        assert!(table.known_to_fail(state, 8, 5));
        assert!(table.known_to_fail(state, 9, 0));
        assert!(!table.known_to_fail(state, 8, 1));
        assert!(!table.known_to_fail(state, 7, 9));
        let mut other = state;
        other.add(seed(2), 0);
        assert!(!table.known_to_fail(other, 100, 100));
        assert_eq!(table.hits, 3);
    }
}

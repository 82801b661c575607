//! Seeded pseudo-random numbers for weights and tokens (xorshift64*: fast, stable
//! across platforms and releases, which a crate's RNG may not be).

/// A small deterministic random generator.
#[derive(Debug, Clone)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator for this seed (any seed, zero included).
    pub fn new(seed: u64) -> SeededRng {
        SeededRng {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[-1, 1)`.
    pub fn next_signed(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// Uniform integer in `[0, bound)` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_values_in_range() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        for _ in 0..1000 {
            let x = a.next_signed();
            assert_eq!(x, b.next_signed());
            assert!((-1.0..1.0).contains(&x));
        }
        assert_ne!(SeededRng::new(1).next_u64(), SeededRng::new(2).next_u64());
    }
}

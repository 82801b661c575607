//! [`SeededRng`], SplitMix64: the one small deterministic generator of wgalloc. The
//! planner's seeded generators (synthetic graphs, generated interval instances,
//! training-step workloads, the climb's moves) and the runtime's seeded models and test data draw from
//! it, so that a seed gives the same instance and the same weights on every machine
//! and release, with no dependency.

/// SplitMix64 over a 64-bit state (the seed). Also known inside the crate as `Rng`.
#[derive(Debug, Clone)]
pub struct Rng(pub(crate) u64);

impl Rng {
    /// A generator for this seed (any seed, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.next()
    }

    /// Uniform in `[-1, 1)` (24 random bits).
    pub fn next_signed(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `(0, 1)` (53 random bits, never 0 or 1).
    pub fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Log-normal with median `median` and log-deviation `sigma` (a standard normal by
    /// Box-Muller from two [`Rng::unit`] draws).
    pub fn log_normal(&mut self, median: f64, sigma: f64) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        median * (sigma * normal).exp()
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index in `0..n` (`0` when `n` is 0): [`Rng::below`] for counts.
    pub(crate) fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, `None` when there are none.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        items.get(self.below(items.len() as u64) as usize).copied()
    }
}

/// The name the runtime and users know the generator by.
pub use Rng as SeededRng;

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_same_seed_gives_the_same_numbers_and_below_stays_below() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        for _ in 0..100 {
            assert_eq!(a.next(), b.next());
        }
        // SplitMix64's published first output for seed 0.
        assert_eq!(Rng(0).next(), 0xE220_A839_7B1D_CDAF);
        let mut r = Rng(3);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert_eq!(r.below(0), 0);
        assert_eq!(r.pick::<u8>(&[]), None);
        let mut s = Rng::new(9);
        assert!((0..1000).all(|_| (-1.0..1.0).contains(&s.next_signed())));
        assert!((0..1000).all(|_| {
            let u = s.unit();
            u > 0.0 && u < 1.0
        }));
        // Half the log-normal draws fall below the median.
        let below = (0..10_000)
            .filter(|_| s.log_normal(2048.0, 2.0) < 2048.0)
            .count();
        assert!(
            (4_700..=5_300).contains(&below),
            "{below} of 10,000 below the median"
        );
        assert_eq!(Rng::new(5).next_u64(), Rng(5).next());
    }
}

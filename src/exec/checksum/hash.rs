//! The integer hash of the checksum run, exactly as `shaders/checksum.wgsl` computes
//! it: u32 wrapping arithmetic only, so the CPU prediction matches the GPU bit for bit.
//!
//! * [`mix32`]: murmur3's 32-bit finalizer, a bijective avalanche mixer.
//! * A tensor's checksum is the wrapping sum over its words of [`term`]`(index, word)`:
//!   order-independent, so a parallel `atomicAdd` reduction on the GPU is exact.
//! * A node's key folds its step and the checksums of its inputs, in order
//!   ([`node_seed`], [`combine`]); its output words are [`fresh_word`]s of the key, or
//!   for an elementwise node [`derived_word`]s of the key and the same word of its
//!   first input (so that writing in place stays legal).

/// murmur3's 32-bit finalizer.
pub const fn mix32(value: u32) -> u32 {
    let mut x = value;
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^= x >> 16;
    x
}

/// The checksum contribution of `word` at word index `index`.
pub const fn term(index: u32, word: u32) -> u32 {
    mix32(word ^ mix32(index.wrapping_add(0x632b_e5ab)))
}

/// The checksum of a run of words: the wrapping sum of their [`term`]s.
pub fn checksum(words: &[u32]) -> u32 {
    words
        .iter()
        .zip(0u32..)
        .fold(0u32, |acc, (&w, i)| acc.wrapping_add(term(i, w)))
}

/// The starting key of the node at `step`.
pub const fn node_seed(step: u32) -> u32 {
    mix32(step.wrapping_mul(0x9e37_79b9).wrapping_add(0x7f4a_7c15))
}

/// The key of graph input `tensor`: its words are [`fresh_word`]s of this key.
pub const fn input_seed(tensor: u32) -> u32 {
    mix32(tensor ^ 0xa511_e9b3).wrapping_add(0x2545_f491)
}

/// The constant that stands for weight `tensor`'s checksum (weights are read-only
/// constants outside the activation plan and are not bound).
pub const fn weight_checksum(tensor: u32) -> u32 {
    mix32(tensor.wrapping_add(0x27d4_eb2f))
}

/// Folds the checksum `sum` of input number `position` into a node's key.
pub const fn combine(key: u32, position: u32, sum: u32) -> u32 {
    mix32(key ^ sum.wrapping_add(mix32(position.wrapping_add(0x1656_67b1))))
}

/// Word `index` of an output that depends on its inputs only through `key`.
pub const fn fresh_word(key: u32, index: u32) -> u32 {
    mix32(key ^ mix32(index.wrapping_mul(0x9e37_79b9).wrapping_add(1)))
}

/// Word `index` of an elementwise output whose first input holds `input` there.
pub const fn derived_word(key: u32, index: u32, input: u32) -> u32 {
    mix32(input.wrapping_add(fresh_word(key, index)))
}

/// How many 4-byte words hold `size` bytes (the last word's padding belongs to the
/// tensor's aligned reservation).
pub const fn words_for(size: u64) -> u64 {
    size.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix32_matches_murmur3_finalizer_reference_values() {
        assert_eq!(mix32(0), 0);
        assert_eq!(mix32(1), 0x514e_28b7);
        assert_eq!(mix32(0xffff_ffff), 0x81f1_6f39);
    }

    #[test]
    fn checksum_is_order_independent_sum_of_terms() {
        let words = [7u32, 0, 0xdead_beef, 42];
        let by_hand = (0..4u32).fold(0u32, |a, i| a.wrapping_add(term(i, words[i as usize])));
        assert_eq!(checksum(&words), by_hand);
        let partial =
            checksum(&words[..2]).wrapping_add(term(2, words[2]).wrapping_add(term(3, words[3])));
        assert_eq!(checksum(&words), partial);
    }

    #[test]
    fn checksum_sees_a_single_changed_word_and_a_swap() {
        let words: Vec<u32> = (0..64).map(|i| fresh_word(9, i)).collect();
        let base = checksum(&words);
        let mut changed = words.clone();
        changed[17] ^= 1;
        assert_ne!(checksum(&changed), base);
        let mut swapped = words.clone();
        swapped.swap(3, 4);
        assert_ne!(checksum(&swapped), base);
    }

    #[test]
    fn input_position_matters_to_the_key() {
        let a = combine(combine(node_seed(3), 0, 11), 1, 22);
        let b = combine(combine(node_seed(3), 0, 22), 1, 11);
        assert_ne!(a, b);
        assert_ne!(node_seed(3), node_seed(4));
    }

    #[test]
    fn sizes_round_up_to_whole_words() {
        assert_eq!(words_for(0), 0);
        assert_eq!(words_for(1), 1);
        assert_eq!(words_for(8), 2);
        assert_eq!(words_for(9), 3);
    }
}

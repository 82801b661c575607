//! [`KvConfig`]: the shape of a KV cache (layers, heads, head width), its block and
//! page sizes, and the sizes that follow from them.

use super::KvError;
use crate::exec::{KV_TABLE_HEADER, MAX_ATTENTION_HEAD_DIM};
use crate::graph::DType;

/// Default offset alignment of blocks and pages: wgpu's largest
/// `min_storage_buffer_offset_alignment` (use [`KvConfig::fit_pages`] for a device's).
pub const DEFAULT_ALIGNMENT: u64 = 256;

/// The shape of a KV cache.
///
/// A **block** holds `block_tokens` tokens of K and V for every layer and head:
/// `block_words = layers * 2 * block_tokens * d` elements (`d = heads * head_dim`), layer
/// `l` from element `l * 2 * block_tokens * d`, its K rows `[block_tokens, d]` then its V
/// rows. An element is an f32 (4 bytes) or, with [`KvConfig::with_dtype`] f16, an f16
/// (2 bytes): "words" below count elements, the byte sizes follow the element type. A **page** is one region of the storage holding `blocks_per_page` blocks, and
/// one binding of the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvConfig {
    /// Layers.
    pub layers: u32,
    /// Heads per layer.
    pub heads: u32,
    /// Width of one head (a multiple of 4, at most [`MAX_ATTENTION_HEAD_DIM`]).
    pub head_dim: u32,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Blocks per page.
    pub blocks_per_page: u32,
    /// The longest context the cache holds (the block table is sized for it).
    pub max_tokens: u32,
    /// Offset alignment of pages and the table (a power of two, at least 4).
    pub alignment: u64,
    /// The element type of K and V in the pages: [`DType::F32`] (the default) or
    /// [`DType::F16`] (half the bytes; the step graph's qkv must be f16 too).
    pub dtype: DType,
}

impl KvConfig {
    /// A cache of `layers` x `heads` heads of `head_dim`, in blocks of `block_tokens`
    /// tokens, one block per page, for contexts up to `max_tokens`.
    ///
    /// # Errors
    /// [`KvError::BadConfig`] for a zero dimension, a head width that is not a multiple
    /// of 4 or is above [`MAX_ATTENTION_HEAD_DIM`], or sizes past 32-bit indexing.
    pub fn new(
        layers: u32,
        heads: u32,
        head_dim: u32,
        block_tokens: u32,
        max_tokens: u32,
    ) -> Result<KvConfig, KvError> {
        let config = KvConfig {
            layers,
            heads,
            head_dim,
            block_tokens,
            blocks_per_page: 1,
            max_tokens,
            alignment: DEFAULT_ALIGNMENT,
            dtype: DType::F32,
        };
        config.check()?;
        Ok(config)
    }

    /// The same cache with `blocks` blocks per page.
    ///
    /// # Errors
    /// As [`KvConfig::new`] (a zero count, a page past 32-bit indexing).
    pub fn with_blocks_per_page(mut self, blocks: u32) -> Result<KvConfig, KvError> {
        self.blocks_per_page = blocks;
        self.check()?;
        Ok(self)
    }

    /// The same cache with K and V stored as `dtype` (f32 or f16).
    ///
    /// # Errors
    /// [`KvError::BadConfig`] for another element type.
    pub fn with_dtype(mut self, dtype: DType) -> Result<KvConfig, KvError> {
        self.dtype = dtype;
        self.check()?;
        Ok(self)
    }

    /// Bytes of one element of K or V (4 for f32, 2 for f16).
    pub fn element_bytes(&self) -> u64 {
        self.dtype.size()
    }

    /// The same cache for a device: pages and the table aligned to its
    /// `min_storage_buffer_offset_alignment`, and as many blocks per page as fit both
    /// `max_page_bytes` and its `max_storage_buffer_binding_size` (at least one, and
    /// no more than the context needs).
    ///
    /// # Errors
    /// [`KvError::TooLargeForBinding`] when one block is larger than a binding.
    pub fn fit_pages(
        mut self,
        limits: &wgpu::Limits,
        max_page_bytes: u64,
    ) -> Result<KvConfig, KvError> {
        let max = limits.max_storage_buffer_binding_size;
        let block = self.block_bytes();
        if block > max {
            return Err(KvError::TooLargeForBinding {
                what: "block",
                bytes: block,
                max,
            });
        }
        let fit = (max.min(max_page_bytes) / block).clamp(1, u64::from(self.max_blocks()));
        self.blocks_per_page = u32::try_from(fit).unwrap_or(u32::MAX);
        self.alignment = u64::from(limits.min_storage_buffer_offset_alignment).max(4);
        self.check()?;
        Ok(self)
    }

    fn check(&self) -> Result<(), KvError> {
        let bad = |problem: String| Err(KvError::BadConfig { problem });
        if self.layers == 0
            || self.heads == 0
            || self.head_dim == 0
            || self.block_tokens == 0
            || self.blocks_per_page == 0
            || self.max_tokens == 0
        {
            return bad(format!("every dimension must be at least 1: {self:?}"));
        }
        if !self.head_dim.is_multiple_of(4) || u64::from(self.head_dim) > MAX_ATTENTION_HEAD_DIM {
            return bad(format!(
                "head width {} must be a multiple of 4 and at most {MAX_ATTENTION_HEAD_DIM}",
                self.head_dim
            ));
        }
        if !matches!(self.dtype, DType::F32 | DType::F16) {
            return bad(format!("K and V are f32 or f16, not {:?}", self.dtype));
        }
        if !self.alignment.is_power_of_two() || self.alignment < 4 {
            return bad(format!(
                "alignment {} is not a power of two >= 4",
                self.alignment
            ));
        }
        if self.page_words() > u64::from(u32::MAX) / 4 || self.table_words() > u64::from(u32::MAX) {
            return bad(format!(
                "a page of {} words or a table of {} words is past 32-bit indexing",
                self.page_words(),
                self.table_words()
            ));
        }
        Ok(())
    }

    /// `heads * head_dim`.
    pub fn width(&self) -> u64 {
        u64::from(self.heads) * u64::from(self.head_dim)
    }

    /// Elements of one block (every layer's K and V rows).
    pub fn block_words(&self) -> u64 {
        u64::from(self.layers) * 2 * u64::from(self.block_tokens) * self.width()
    }

    /// Bytes of one block.
    pub fn block_bytes(&self) -> u64 {
        self.block_words().saturating_mul(self.element_bytes())
    }

    /// Elements of one page.
    pub fn page_words(&self) -> u64 {
        self.block_words()
            .saturating_mul(u64::from(self.blocks_per_page))
    }

    /// Bytes of one page (one binding).
    pub fn page_bytes(&self) -> u64 {
        self.page_words().saturating_mul(self.element_bytes())
    }

    /// Blocks of the longest context.
    pub fn max_blocks(&self) -> u32 {
        self.blocks_for(self.max_tokens)
    }

    /// Blocks holding `tokens` tokens.
    pub fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_tokens)
    }

    /// Pages holding `tokens` tokens when blocks fill pages in order (the cache hands
    /// out the lowest free block first): the page slots a step graph for contexts up to
    /// `tokens` binds.
    pub fn pages_for(&self, tokens: u32) -> u32 {
        self.blocks_for(tokens)
            .div_ceil(self.blocks_per_page)
            .max(1)
    }

    /// Words (u32) of the block table: the header, then (page, element offset) per
    /// block.
    pub fn table_words(&self) -> u64 {
        KV_TABLE_HEADER + 2 * u64::from(self.max_blocks())
    }

    /// Bytes of K and V for `tokens` tokens (all layers), whole blocks not counted.
    pub fn bytes_for_tokens(&self, tokens: u64) -> u64 {
        tokens
            .saturating_mul(u64::from(self.layers))
            .saturating_mul(2 * self.width() * self.element_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_layout() {
        let c = KvConfig::new(2, 3, 8, 5, 23).expect("valid");
        assert_eq!(c.width(), 24);
        assert_eq!(c.block_words(), 2 * 2 * 5 * 24);
        assert_eq!(c.max_blocks(), 5);
        assert_eq!(c.table_words(), 4 + 10);
        let paged = c.with_blocks_per_page(2).expect("valid");
        assert_eq!(paged.page_bytes(), 2 * c.block_bytes());
        assert_eq!(paged.pages_for(23), 3);
        assert_eq!(paged.pages_for(10), 1);
        assert_eq!(paged.pages_for(0), 1);
    }

    #[test]
    fn an_f16_cache_holds_the_same_elements_in_half_the_bytes() {
        let c = KvConfig::new(2, 3, 8, 5, 23).expect("valid");
        let h = c.with_dtype(DType::F16).expect("f16 pages");
        assert_eq!(h.block_words(), c.block_words());
        assert_eq!(h.table_words(), c.table_words());
        assert_eq!((c.element_bytes(), h.element_bytes()), (4, 2));
        assert_eq!(2 * h.block_bytes(), c.block_bytes());
        assert_eq!(2 * h.page_bytes(), c.page_bytes());
        assert_eq!(2 * h.bytes_for_tokens(7), c.bytes_for_tokens(7));
        assert!(matches!(
            c.with_dtype(DType::U32),
            Err(KvError::BadConfig { .. })
        ));
    }

    #[test]
    fn bad_shapes_are_refused_with_their_numbers() {
        for (heads, hd, bt) in [(0, 8, 4), (2, 6, 4), (2, 260, 4), (2, 8, 0)] {
            match KvConfig::new(1, heads, hd, bt, 16) {
                Err(KvError::BadConfig { problem }) => assert!(!problem.is_empty()),
                other => panic!("{heads}x{hd}/{bt}: expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn pages_fit_the_binding_limit() {
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: 10_000,
            min_storage_buffer_offset_alignment: 64,
            ..wgpu::Limits::default()
        };
        let c = KvConfig::new(1, 2, 8, 4, 100).expect("valid"); // 512-byte blocks
        let fit = c.fit_pages(&limits, u64::MAX).expect("fits");
        assert_eq!((fit.blocks_per_page, fit.alignment), (19, 64));
        assert!(fit.page_bytes() <= 10_000);
        let capped = c.fit_pages(&limits, 1100).expect("fits");
        assert_eq!(capped.blocks_per_page, 2);
        let huge = KvConfig::new(64, 16, 64, 64, 64).expect("valid");
        assert!(matches!(
            huge.fit_pages(&limits, u64::MAX),
            Err(KvError::TooLargeForBinding { .. })
        ));
    }
}

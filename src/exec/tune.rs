//! Kernels chosen on the device: the tuner of the tiled matmuls' register tiles and of
//! fused attention's form.
//!
//! [`MatmulTile::choose`] picks a tile by a shape rule fixed in code (measured on
//! lavapipe), attention runs one invocation per query ([`AttentionForm::PerQuery`],
//! also measured on lavapipe) and a layer norm takes its form by adapter type
//! ([`NormForm::rule`]). The tuner replaces those guesses on the adapter the work runs
//! on: the first time an executor meets a tiled matmul, a fused attention or a layer
//! norm of a new *shape class* ([`ShapeClass`]: the kernel family, the storage type and three
//! dimensions each rounded up to a power of two: f16 kernels are timed apart from f32
//! ones), it times every candidate ([`TuneSettings::candidates`], at most 8 tiles, or
//! [`TuneSettings::attention`]'s or [`TuneSettings::norm`]'s forms) on that call's own shape with GPU timestamp
//! queries, in interleaved rounds (every candidate built and warmed by one dispatch,
//! then [`TuneSettings::repetitions`] rounds that each time every candidate once, in an
//! order rotated from round to round, so that a slow stretch of the machine falls on
//! every candidate alike; each candidate's fastest round kept), keeps the fastest (the
//! rule's, unless another beats it by more than 5%) and writes the choice to a cache
//! file keyed by the
//! adapter's name, driver, driver info and backend and by the shape class
//! ([`TuneCache`]). Later processes read the choice from the file and time nothing.
//!
//! * `WGALLOC_TUNE=0` (or `off`, `false`, `no`) skips tuning: the rule decides, and the
//!   cache is neither read nor written.
//! * `WGALLOC_DECODE_SLICES=16` or `256` sets how many invocations split a decode
//!   step's cached keys ([`TuneSettings::decode`]; otherwise 16 on a CPU adapter, 256
//!   elsewhere).
//! * `WGALLOC_TUNE_CACHE=<file>` names the cache file; otherwise
//!   `$XDG_CACHE_HOME/wgalloc/tune.json`, else `$HOME/.cache/wgalloc/tune.json`. The file
//!   is JSON and may be deleted at any time. A file that cannot be read or parsed is
//!   ignored with a warning (and replaced on the next write); a directory that cannot
//!   be written leaves the choices in memory only, with a warning.
//! * Where the device has no `TIMESTAMP_QUERY`, the rule decides (nothing is timed).
//! * Tuning is bounded: per device, once [`TuneSettings::budget`] of tuning time (building
//!   the candidates' pipelines included) is spent, classes not yet tuned take the rule
//!   (and are not cached, so a later process tunes them). The budget is checked before
//!   each candidate is built, so a class whose candidates it cuts short takes the rule
//!   too, and before each round after the first (a class whose later rounds it cuts
//!   keeps the rounds run, at least one). The time spent ends at most one candidate's
//!   build and warm-up plus one round (a dispatch of each candidate) past the budget.
//!
//! Every candidate tile but the split ones computes the same products (each output
//! element sums over `k` in the same order), so the choice changes speed, not results;
//! the matrix-vector tiles split over `k` ([`MatmulTile::Rows1Split`] and the narrower
//! [`MatmulTile::Rows1Split64`] and [`MatmulTile::Rows1Split256`], offered on GPUs
//! only) add 16, 64 or 256 partial sums at the end, so their results differ from the
//! others' by rounding, and so do the two
//! attention forms (they rescale the online softmax after 8 or 16 keys) and the two
//! layer norm forms (they sum a row in another order). The time spent
//! tuning is reported apart from the run's own times ([`crate::exec::RunReport`]'s
//! `tune_time`) and by [`tuning`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::kernels::{
    self, AttentionForm, DecodeSlices, MatmulTile, NormForm, Pick, SharedRegistry, StorageType,
};
use super::ops::OpCall;
use super::params::{KernelParams, UniformPacker, PARAMS_SIZE};
use super::timer::PassTimer;
use super::ExecError;
use crate::device::{scoped, DeviceError, GpuContext};

mod rounds;

/// At most this many candidate tiles are timed per shape class.
pub(crate) const MAX_CANDIDATES: usize = 8;
/// At most this many timing rounds (timed dispatches per candidate).
pub(crate) const MAX_REPETITIONS: u32 = 8;
/// Timing rounds (timed dispatches per candidate) by default.
pub(crate) const DEFAULT_REPETITIONS: u32 = 3;
/// Tuning time per device by default, after which the rule decides.
pub(crate) const DEFAULT_BUDGET: Duration = Duration::from_secs(20);
/// A candidate whose warm-up dispatch takes longer than this is timed once only (in
/// the first round).
pub(crate) const SLOW_DISPATCH: Duration = Duration::from_millis(200);
/// Calls whose operands exceed this many bytes in all are not tuned (the rule).
pub(crate) const MAX_TUNE_BYTES: u64 = 512 << 20;
/// A tile other than the rule's is kept only when it is faster than the rule's by
/// more than this fraction (5%).
pub(crate) const RULE_MARGIN: f64 = 0.05;
/// The cache file's format version; a file of another version is ignored (5: the
/// shared-read query blocks joined the attention candidates; 6: the narrow split tiles
/// joined the candidates of up to [`SPLIT_MAX_ROWS`](crate::exec::SPLIT_MAX_ROWS) rows
/// on GPUs, so a GPU's earlier choices for 5 to 256 rows are timed again; 7: the
/// tiled matmuls' epilogues read their accumulators by constant index, which made the
/// tall shared tiles up to 2x faster at small `k` on llvmpipe, so earlier choices
/// between tiles are timed again).
pub(crate) const CACHE_VERSION: u32 = 7;

/// Why the cache could not be read or written. Never fatal: the tuner warns and goes
/// on with what it has in memory.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The file or its directory could not be read or written.
    #[error("tuning cache {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a tuning cache of this version.
    #[error("tuning cache {path} is not valid ({reason}); ignored")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

/// The kernels a choice is tuned for: the tiled matmuls share a tile rule but not their
/// inner loops, so each family is tuned apart; fused attention chooses its form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelFamily {
    /// `matmul_tiled.wgsl` (`matmul` and the fused bias, GELU and residual forms),
    /// timed with its plain kernel.
    Tiled,
    /// `matmul_bt_tiled.wgsl` (`matmul_bt`).
    BtTiled,
    /// `matmul_norm.wgsl` (a layer norm in the matmul's prologue).
    NormTiled,
    /// Fused causal attention (`attention_causal`), timed by its form
    /// ([`AttentionForm`]). Its class's `m` is the sequence, `k` the head width and
    /// `n` the heads.
    Attention,
    /// A layer norm (`layer_norm`), timed by its form ([`NormForm`]). Its class's `m`
    /// is the rows, `k` the columns and `n` 1.
    LayerNorm,
}

impl KernelFamily {
    /// Whether the family chooses a matmul tile (not an attention or norm form).
    pub fn is_matmul(self) -> bool {
        !matches!(self, KernelFamily::Attention | KernelFamily::LayerNorm)
    }
}

/// What the tuner chooses for a shape class: a tiled matmul's register tile, or fused
/// attention's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// A tiled matmul's register tile.
    Tile(MatmulTile),
    /// Fused attention's form.
    Attention(AttentionForm),
    /// A layer norm's form.
    Norm(NormForm),
}

impl Variant {
    /// Its name in the tuning cache ([`MatmulTile::name`], [`AttentionForm::name`],
    /// [`NormForm::name`]: no name is in two of the sets).
    pub fn name(self) -> &'static str {
        match self {
            Variant::Tile(t) => t.name(),
            Variant::Attention(f) => f.name(),
            Variant::Norm(f) => f.name(),
        }
    }

    /// The variant named `name`, if any.
    pub fn from_name(name: &str) -> Option<Variant> {
        MatmulTile::from_name(name)
            .map(Variant::Tile)
            .or_else(|| AttentionForm::from_name(name).map(Variant::Attention))
            .or_else(|| NormForm::from_name(name).map(Variant::Norm))
    }

    /// Whether it is a choice for `family` (a tile for a matmul family, a form for
    /// attention or a layer norm).
    pub fn is_for(self, family: KernelFamily) -> bool {
        match self {
            Variant::Tile(_) => family.is_matmul(),
            Variant::Attention(_) => family == KernelFamily::Attention,
            Variant::Norm(_) => family == KernelFamily::LayerNorm,
        }
    }

    /// The tile, for a matmul's choice.
    pub fn tile(self) -> Option<MatmulTile> {
        match self {
            Variant::Tile(t) => Some(t),
            _ => None,
        }
    }

    /// The form, for attention's choice.
    pub fn form(self) -> Option<AttentionForm> {
        match self {
            Variant::Attention(f) => Some(f),
            _ => None,
        }
    }

    /// The form, for a layer norm's choice.
    pub fn norm(self) -> Option<NormForm> {
        match self {
            Variant::Norm(f) => Some(f),
            _ => None,
        }
    }

    /// What a kernel selection takes from it (a layer norm by rows unless it is a
    /// norm's choice of a workgroup per row).
    pub fn pick(self) -> Pick {
        Pick {
            tile: self.tile(),
            attention: self.form(),
            norm_rows: self.norm().is_none_or(|f| f == NormForm::InvocationPerRow),
            ..Pick::default()
        }
    }
}

impl Serialize for Variant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A tuned call's shape class: its family, its storage type and three dimensions
/// rounded up to powers of two (`m`, `k`, `n` of a matmul; the sequence, head width
/// and heads of attention; the rows, columns and 1 of a layer norm). One tile or form
/// is chosen per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ShapeClass {
    /// The kernel family.
    pub family: KernelFamily,
    /// The element type the kernel loads and stores (its f16 and f32 forms are timed
    /// apart).
    #[serde(default)]
    pub storage: StorageType,
    /// Rows of the output, rounded up to a power of two.
    pub m: u32,
    /// The inner dimension, rounded up to a power of two.
    pub k: u32,
    /// Columns of the output, rounded up to a power of two.
    pub n: u32,
}

/// A tuned call as the tuner sees it (a tiled matmul, fused attention or a layer norm):
/// its family and exact shape (for attention: the sequence, head width and heads as
/// `m`, `k`, `n`; for a layer norm: the rows, columns and 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TunedShape {
    /// The kernel family.
    pub family: KernelFamily,
    /// The element type of its tensors.
    pub storage: StorageType,
    /// Rows of the output.
    pub m: u32,
    /// The inner dimension.
    pub k: u32,
    /// Columns of the output.
    pub n: u32,
}

impl TunedShape {
    /// The tuned call `call` is over tensors stored as `storage`, or `None` when it runs
    /// no tiled matmul, fused attention or layer norm.
    pub fn of(call: &OpCall, storage: StorageType) -> Option<TunedShape> {
        let (family, m, k, n) = match *call {
            OpCall::Matmul {
                m,
                k,
                n,
                transposed_b,
            } if kernels::tiled(k, n, transposed_b) => {
                let family = if transposed_b {
                    KernelFamily::BtTiled
                } else {
                    KernelFamily::Tiled
                };
                (family, m, k, n)
            }
            OpCall::MatmulFused { m, k, n, .. } => (KernelFamily::Tiled, m, k, n),
            OpCall::NormMatmul { m, k, n, .. } => (KernelFamily::NormTiled, m, k, n),
            OpCall::Attention {
                seq,
                heads,
                head_dim,
                ..
            } => (KernelFamily::Attention, seq, head_dim, heads),
            OpCall::LayerNorm { rows, cols, .. } => (KernelFamily::LayerNorm, rows, cols, 1),
            _ => return None,
        };
        Some(TunedShape {
            family,
            storage,
            m,
            k,
            n,
        })
    }

    /// Its shape class.
    pub fn class(self) -> ShapeClass {
        let up = |x: u32| x.checked_next_power_of_two().unwrap_or(1 << 31);
        // A layer norm's rows round down: a row per invocation needs at least 64 rows,
        // so every shape of a class then takes the same forms.
        let m = match self.family {
            KernelFamily::LayerNorm if self.m > 0 => 1 << self.m.ilog2(),
            _ => up(self.m),
        };
        ShapeClass {
            family: self.family,
            storage: self.storage,
            m,
            k: up(self.k),
            n: up(self.n),
        }
    }

    /// Whether `variant` is one this exact shape can run (a class's choice is made on
    /// one of its shapes; a tile or form another of them cannot take is not used).
    pub fn takes(self, variant: Variant) -> bool {
        variant.is_for(self.family)
            && match variant {
                Variant::Tile(t) => t.fits(self.m),
                Variant::Attention(f) => f.fits(self.k),
                Variant::Norm(f) => f.fits(self.m, self.k),
            }
    }

    /// The rule's choice: [`MatmulTile::choose`] ([`MatmulTile::choose_shared`] on a
    /// CPU adapter with subgroups, where the shared-read tiles run), or attention's and
    /// a layer norm's form by adapter type ([`AttentionForm::rule`], [`NormForm::rule`]).
    /// `cpu_adapter`: the device is a CPU adapter; `subgroups`: it runs subgroup
    /// operations.
    pub fn rule(self, cpu_adapter: bool, subgroups: bool) -> Variant {
        match self.family {
            KernelFamily::Attention => {
                Variant::Attention(AttentionForm::rule_for(cpu_adapter, subgroups, self.k))
            }
            KernelFamily::LayerNorm => Variant::Norm(NormForm::rule(cpu_adapter, self.m, self.k)),
            _ if cpu_adapter && subgroups => Variant::Tile(MatmulTile::choose_shared(self.m)),
            _ => Variant::Tile(MatmulTile::choose(self.m, self.n)),
        }
    }

    /// The operation it times: the call with this shape (attention with the default
    /// scale), and its operands' lengths in elements, in binding order.
    fn call(self) -> (OpCall, Vec<u64>) {
        let (m, k, n) = (u64::from(self.m), u64::from(self.k), u64::from(self.n));
        match self.family {
            KernelFamily::Tiled | KernelFamily::BtTiled => (
                OpCall::Matmul {
                    m: self.m,
                    k: self.k,
                    n: self.n,
                    transposed_b: self.family == KernelFamily::BtTiled,
                },
                vec![m * k, k * n, m * n],
            ),
            // Bound as the kernel binds them: x, w, out, bias, gain, beta.
            KernelFamily::NormTiled => (
                OpCall::NormMatmul {
                    m: self.m,
                    k: self.k,
                    n: self.n,
                    gelu: false,
                    eps: super::ops::DEFAULT_EPS,
                },
                vec![m * k, k * n, m * n, n, k, k],
            ),
            // qkv [seq, 3 d], out [seq, d], d = heads x head width.
            KernelFamily::Attention => (
                OpCall::Attention {
                    seq: self.m,
                    heads: self.n,
                    head_dim: self.k,
                    scale: 1.0 / (self.k as f32).sqrt(),
                },
                vec![3 * m * n * k, m * n * k],
            ),
            // Bound as the kernel binds them: x, gain, out, bias.
            KernelFamily::LayerNorm => (
                OpCall::LayerNorm {
                    rows: self.m,
                    cols: self.k,
                    eps: super::ops::DEFAULT_EPS,
                },
                vec![m * k, k, m * k, k],
            ),
        }
    }
}

/// How the tuner runs on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuneSettings {
    /// Whether to tune at all (`false`: the rule, no cache).
    pub enabled: bool,
    /// The cache file (`None`: choices are kept in memory only).
    pub cache: Option<PathBuf>,
    /// The tiles timed, in order (capped at 8, and to the tiles whose workgroup the
    /// device's limits allow; the tiles that share reads across a subgroup only on a
    /// CPU adapter with subgroups; of several, the tiles meant for GPUs
    /// ([`MatmulTile::for_gpus_only`]) not on a CPU adapter; one alone is forced;
    /// empty: the rule).
    pub candidates: Vec<MatmulTile>,
    /// The attention forms timed, in order (capped to the forms the head width and the
    /// device's limits allow; empty: the rule, per query).
    pub attention: Vec<AttentionForm>,
    /// The layer norm forms timed, in order (capped to the forms the shape allows;
    /// empty: the rule by adapter type).
    pub norm: Vec<NormForm>,
    /// Timing rounds, each timing every candidate once (capped at 8, at least 1): the
    /// timed dispatches per candidate.
    pub repetitions: u32,
    /// Tuning time per device after which the rule decides.
    pub budget: Duration,
    /// How many invocations split a decode step's cached keys (`None`: the rule by
    /// adapter type, [`DecodeSlices::rule`]). Not timed: a test or a user may force it.
    pub decode: Option<DecodeSlices>,
}

impl Default for TuneSettings {
    fn default() -> TuneSettings {
        TuneSettings::from_env()
    }
}

impl TuneSettings {
    /// The settings of the process environment (`WGALLOC_TUNE`, `WGALLOC_TUNE_CACHE`,
    /// `XDG_CACHE_HOME`, `HOME`).
    pub fn from_env() -> TuneSettings {
        TuneSettings::from_vars(|name| std::env::var_os(name).map(PathBuf::from))
    }

    /// The settings for the variables `var` gives (as [`TuneSettings::from_env`] reads
    /// them from the environment).
    pub fn from_vars(var: impl Fn(&str) -> Option<PathBuf>) -> TuneSettings {
        let off = var("WGALLOC_TUNE").is_some_and(|v| {
            let v = v.to_string_lossy().trim().to_ascii_lowercase();
            matches!(v.as_str(), "0" | "off" | "false" | "no")
        });
        let nonempty = |name: &str| var(name).filter(|p| !p.as_os_str().is_empty());
        let cache = nonempty("WGALLOC_TUNE_CACHE").or_else(|| {
            nonempty("XDG_CACHE_HOME")
                .or_else(|| nonempty("HOME").map(|h| h.join(".cache")))
                .map(|dir| dir.join("wgalloc").join("tune.json"))
        });
        TuneSettings {
            enabled: !off,
            cache,
            candidates: MatmulTile::ALL.to_vec(),
            attention: AttentionForm::ALL.to_vec(),
            norm: NormForm::ALL.to_vec(),
            repetitions: DEFAULT_REPETITIONS,
            budget: DEFAULT_BUDGET,
            decode: var("WGALLOC_DECODE_SLICES").and_then(|v| match v.to_string_lossy().trim() {
                "16" => Some(DecodeSlices::Queries),
                "256" => Some(DecodeSlices::Wide),
                other => {
                    log::warn!(
                        "WGALLOC_DECODE_SLICES={other} is neither 16 nor 256; the rule decides"
                    );
                    None
                }
            }),
        }
    }

    /// Settings that never tune: the rule decides.
    pub fn off() -> TuneSettings {
        TuneSettings {
            enabled: false,
            cache: None,
            candidates: Vec::new(),
            attention: Vec::new(),
            norm: Vec::new(),
            repetitions: DEFAULT_REPETITIONS,
            budget: DEFAULT_BUDGET,
            decode: None,
        }
    }
}

/// The adapter a choice was measured on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AdapterKey {
    /// The adapter's name.
    pub name: String,
    /// The driver's name.
    pub driver: String,
    /// The driver's version string.
    pub driver_info: String,
    /// The backend (`Vulkan`, `Metal`, ...).
    pub backend: String,
}

impl AdapterKey {
    /// The key of `info`.
    pub fn of(info: &wgpu::AdapterInfo) -> AdapterKey {
        AdapterKey {
            name: info.name.clone(),
            driver: info.driver.clone(),
            driver_info: info.driver_info.clone(),
            backend: format!("{:?}", info.backend),
        }
    }
}

/// One cached choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The adapter it was measured on.
    pub adapter: AdapterKey,
    /// The shape class.
    pub class: ShapeClass,
    /// The tile or form chosen ([`Variant::name`]).
    pub tile: String,
    /// Each candidate's best time (its fastest round) in microseconds, by name.
    pub micros: BTreeMap<String, f64>,
}

/// The tuning cache file: every choice made, on every adapter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TuneCache {
    /// The format version of the file (a file of another version is ignored).
    pub version: u32,
    /// The choices.
    pub entries: Vec<CacheEntry>,
}

impl TuneCache {
    /// An empty cache of this version.
    pub fn new() -> TuneCache {
        TuneCache {
            version: CACHE_VERSION,
            entries: Vec::new(),
        }
    }

    /// Reads `path`: an absent file is an empty cache.
    ///
    /// # Errors
    /// [`TuneError::Io`] when the file exists but cannot be read; [`TuneError::Corrupt`]
    /// when it is not JSON of this shape and version.
    pub fn load(path: &Path) -> Result<TuneCache, TuneError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TuneCache::new()),
            Err(source) => {
                return Err(TuneError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let cache: TuneCache = serde_json::from_str(&text).map_err(|e| TuneError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if cache.version != CACHE_VERSION {
            return Err(TuneError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("version {}, expected {CACHE_VERSION}", cache.version),
            });
        }
        Ok(cache)
    }

    /// [`TuneCache::load`], with a warning and an empty cache in place of an error.
    pub fn load_or_warn(path: &Path) -> TuneCache {
        TuneCache::load(path).unwrap_or_else(|e| {
            log::warn!("{e}");
            TuneCache::new()
        })
    }

    /// Writes the cache to `path` (its directory created), through a temporary file
    /// renamed over it so that a reader never sees half a file.
    ///
    /// # Errors
    /// [`TuneError::Io`] when the directory or the file cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), TuneError> {
        let io = |source| TuneError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        // A name of this write's own: devices of one process may write at once.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut temp = path.as_os_str().to_owned();
        temp.push(format!(".{}.{write}.tmp", std::process::id()));
        let temp = PathBuf::from(temp);
        std::fs::write(&temp, text).map_err(io)?;
        std::fs::rename(&temp, path).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            io(e)
        })
    }

    /// The tile or form cached for `class` on `adapter` (`None` also for a name that
    /// is not of the class's family).
    pub fn get(&self, adapter: &AdapterKey, class: &ShapeClass) -> Option<Variant> {
        self.entries
            .iter()
            .find(|e| &e.adapter == adapter && &e.class == class)
            .and_then(|e| Variant::from_name(&e.tile))
            .filter(|v| v.is_for(class.family))
    }

    /// Adds (or replaces) the entry of its adapter and class.
    pub fn insert(&mut self, entry: CacheEntry) {
        self.entries
            .retain(|e| !(e.adapter == entry.adapter && e.class == entry.class));
        self.entries.push(entry);
    }
}

/// Where a choice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Timed on the device by this process.
    Tuned,
    /// Read from the cache file.
    Cache,
    /// The rule ([`MatmulTile::choose`], attention per query): tuning off, no
    /// timestamps, budget spent or a timing that failed.
    Rule,
}

/// One choice the tuner made on a device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// The shape class.
    pub class: ShapeClass,
    /// The exact shape that was timed (or first met).
    pub shape: (u32, u32, u32),
    /// The tile or form.
    pub variant: Variant,
    /// Where it came from.
    pub source: Source,
    /// Each candidate's best time, its fastest round (tuned choices only).
    pub times: Vec<(Variant, Duration)>,
}

/// What the tuner did on a device so far ([`tuning`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TuneSummary {
    /// Whether tuning is on ([`TuneSettings::enabled`]).
    pub enabled: bool,
    /// The cache file ([`TuneSettings::cache`]).
    pub cache: Option<PathBuf>,
    /// Every choice, in the order they were made.
    pub choices: Vec<Choice>,
    /// Time spent timing candidates (and building their pipelines).
    pub time: Duration,
}

impl TuneSummary {
    /// One line: the time spent tuning and where the choices came from.
    pub fn line(&self) -> String {
        let count = |source| self.choices.iter().filter(|c| c.source == source).count();
        let cache = self.cache.as_ref().map_or_else(
            || "no cache file".to_string(),
            |p| format!("cache {}", p.display()),
        );
        if !self.enabled {
            return format!(
                "off (WGALLOC_TUNE=0): {} shape class(es) by the rule",
                self.choices.len()
            );
        }
        format!(
            "{:.1} ms timing kernels: {} shape class(es) tuned, {} from the cache, {} by the rule ({cache})",
            self.time.as_secs_f64() * 1e3,
            count(Source::Tuned),
            count(Source::Cache),
            count(Source::Rule),
        )
    }
}

impl Choice {
    /// One line: the class, the shape, the tile or form and, when timed, each
    /// candidate's time.
    pub fn line(&self) -> String {
        let family = match self.class.family {
            KernelFamily::Tiled => "matmul",
            KernelFamily::BtTiled => "matmul_bt",
            KernelFamily::NormTiled => "norm+matmul",
            KernelFamily::Attention => "attention",
            KernelFamily::LayerNorm => "layer_norm",
        };
        let family = match self.class.storage {
            StorageType::F32 => family.to_string(),
            StorageType::F16 => format!("{family} f16"),
        };
        let (m, k, n) = self.shape;
        let source = match self.source {
            Source::Tuned => "tuned",
            Source::Cache => "cache",
            Source::Rule => "rule",
        };
        let times: Vec<String> = self
            .times
            .iter()
            .map(|(t, d)| format!("{} {:.3} ms", t.name(), d.as_secs_f64() * 1e3))
            .collect();
        let times = if times.is_empty() {
            String::new()
        } else {
            format!(" ({})", times.join(", "))
        };
        let c = &self.class;
        let (shape, class) = match c.family {
            KernelFamily::Attention => (
                format!("seq {m} hd {k} heads {n}"),
                format!("seq {} hd {} heads {}", c.m, c.k, c.n),
            ),
            KernelFamily::LayerNorm => {
                (format!("{m} rows x {k}"), format!("{} rows x {}", c.m, c.k))
            }
            _ => (format!("{m}x{k}x{n}"), format!("{}x{}x{}", c.m, c.k, c.n)),
        };
        format!(
            "{family} {shape} (class {class}): {} by {source}{times}",
            self.variant.name()
        )
    }
}

/// The tuner of one device, shared by every executor on it.
#[derive(Debug)]
pub(crate) struct Tuner {
    settings: TuneSettings,
    adapter: AdapterKey,
    /// The cache file's contents, once read.
    cache: Option<TuneCache>,
    chosen: HashMap<ShapeClass, Variant>,
    summary: TuneSummary,
}

/// The device's tuner behind its lock.
#[derive(Debug)]
pub(crate) struct SharedTuner(Mutex<Option<Tuner>>);

impl SharedTuner {
    fn of(ctx: &GpuContext) -> Arc<SharedTuner> {
        ctx.shared.get_or_init(|| SharedTuner(Mutex::new(None)))
    }

    fn with<T>(ctx: &GpuContext, f: impl FnOnce(&mut Tuner) -> T) -> T {
        let shared = SharedTuner::of(ctx);
        let mut guard = shared.0.lock().unwrap_or_else(PoisonError::into_inner);
        let tuner = guard.get_or_insert_with(|| Tuner::new(ctx, TuneSettings::from_env()));
        f(tuner)
    }
}

/// Sets how the tuner runs on `ctx`'s device (by default [`TuneSettings::from_env`]),
/// forgetting the choices made so far on it. Executors take the new choices on their
/// next unkeyed run or new recording.
pub fn configure(ctx: &GpuContext, settings: TuneSettings) {
    let shared = SharedTuner::of(ctx);
    let mut guard = shared.0.lock().unwrap_or_else(PoisonError::into_inner);
    *guard = Some(Tuner::new(ctx, settings));
}

/// The choices made on `ctx`'s device so far and the time spent tuning.
pub fn tuning(ctx: &GpuContext) -> TuneSummary {
    SharedTuner::with(ctx, |t| t.summary.clone())
}

/// How many invocations split a decode step's cached keys on `ctx`'s device: the
/// settings' [`TuneSettings::decode`], else [`DecodeSlices::rule`] by adapter type.
pub fn decode_slices(ctx: &GpuContext) -> DecodeSlices {
    let cpu_adapter = ctx.is_cpu_adapter();
    SharedTuner::with(ctx, |t| t.settings.decode).unwrap_or_else(|| DecodeSlices::rule(cpu_adapter))
}

/// Time spent tuning on `ctx`'s device so far.
pub(crate) fn time_spent(ctx: &GpuContext) -> Duration {
    SharedTuner::with(ctx, |t| t.summary.time)
}

/// The tile or form for `shape` on `ctx`'s device: the choice made for its class, else
/// the cache's, else the fastest candidate timed now (see the module's documentation),
/// else the rule. Never fails: a timing that fails leaves the rule, with a warning.
pub(crate) fn variant_for(ctx: &GpuContext, shape: TunedShape) -> Variant {
    SharedTuner::with(ctx, |t| t.variant(ctx, shape))
}

impl Tuner {
    fn new(ctx: &GpuContext, settings: TuneSettings) -> Tuner {
        Tuner {
            adapter: AdapterKey::of(&ctx.info),
            cache: None,
            chosen: HashMap::new(),
            summary: TuneSummary {
                enabled: settings.enabled,
                cache: settings.cache.clone(),
                ..TuneSummary::default()
            },
            settings,
        }
    }

    fn record(
        &mut self,
        shape: TunedShape,
        variant: Variant,
        source: Source,
        times: Vec<(Variant, Duration)>,
    ) {
        self.chosen.insert(shape.class(), variant);
        self.summary.choices.push(Choice {
            class: shape.class(),
            shape: (shape.m, shape.k, shape.n),
            variant,
            source,
            times,
        });
    }

    /// The candidates for `shape` that the settings name, as [`offered`] filters them.
    fn candidates(&self, ctx: &GpuContext, shape: TunedShape) -> Vec<Variant> {
        let s = &self.settings;
        let named: Vec<Variant> = match shape.family {
            KernelFamily::LayerNorm => s.norm.iter().copied().map(Variant::Norm).collect(),
            KernelFamily::Attention => s
                .attention
                .iter()
                .copied()
                .map(Variant::Attention)
                .collect(),
            _ => s.candidates.iter().copied().map(Variant::Tile).collect(),
        };
        offered(ctx, shape, named)
    }

    fn variant(&mut self, ctx: &GpuContext, shape: TunedShape) -> Variant {
        let class = shape.class();
        let rule = shape.rule(ctx.is_cpu_adapter(), subgroups_for(ctx, shape.family));
        if let Some(&variant) = self.chosen.get(&class) {
            // A choice for the class this shape cannot run (made on another of its
            // shapes): the rule, for this call only.
            return if shape.takes(variant) { variant } else { rule };
        }
        let candidates = self.candidates(ctx, shape);
        // One candidate is a choice forced by the settings (or the only one the shape
        // allows): nothing to time or read.
        if self.settings.enabled && candidates.len() == 1 {
            let chosen = candidates[0];
            let source = if chosen == rule {
                Source::Rule
            } else {
                Source::Tuned
            };
            self.record(shape, chosen, source, Vec::new());
            return chosen;
        }
        let tunable = self.settings.enabled
            && ctx.has_timestamps()
            && !candidates.is_empty()
            && self.summary.time < self.settings.budget;
        if !tunable {
            self.record(shape, rule, Source::Rule, Vec::new());
            return rule;
        }
        if let Some(path) = self.settings.cache.clone() {
            let cache = self
                .cache
                .get_or_insert_with(|| TuneCache::load_or_warn(&path));
            if let Some(chosen) = cache.get(&self.adapter, &class).filter(|v| shape.takes(*v)) {
                self.record(shape, chosen, Source::Cache, Vec::new());
                return chosen;
            }
        }
        let started = Instant::now();
        let deadline = started + self.settings.budget.saturating_sub(self.summary.time);
        let timed = time_candidates(
            ctx,
            shape,
            &candidates,
            self.settings.repetitions,
            Some(deadline),
        );
        self.summary.time += started.elapsed();
        let Timed { times, cut } = match timed {
            Ok(timed) => timed,
            Err(e) => {
                log::warn!("tuning {class:?} failed ({e}); the rule decides");
                self.record(shape, rule, Source::Rule, Vec::new());
                return rule;
            }
        };
        if cut {
            // The budget ran out inside the class: what was timed is reported, the
            // rule decides, and nothing is cached (a later process tunes the class).
            log::info!(
                "tuning budget spent after {} of {} candidates for {class:?}; the rule decides",
                times.len(),
                candidates.len()
            );
            self.record(shape, rule, Source::Rule, times);
            return rule;
        }
        let Some(chosen) = fastest(&times, rule) else {
            self.record(shape, rule, Source::Rule, Vec::new());
            return rule;
        };
        if let Some(path) = self.settings.cache.clone() {
            let cache = self.cache.get_or_insert_with(TuneCache::new);
            // Entries other processes wrote since this one read the file are kept.
            let mut merged = TuneCache::load(&path).unwrap_or_else(|_| TuneCache::new());
            for entry in &cache.entries {
                merged.insert(entry.clone());
            }
            merged.insert(CacheEntry {
                adapter: self.adapter.clone(),
                class,
                tile: chosen.name().to_string(),
                micros: times
                    .iter()
                    .map(|(t, d)| (t.name().to_string(), d.as_secs_f64() * 1e6))
                    .collect(),
            });
            if let Err(e) = merged.save(&path) {
                log::warn!("{e}; the tuned choices are kept in memory only");
            }
            *cache = merged;
        }
        self.record(shape, chosen, Source::Tuned, times);
        chosen
    }
}

/// Of `named`, the candidates the tuner offers for `shape` on `ctx`'s device, in order:
/// those the shape takes ([`TunedShape::takes`]) and the device can run ([`runs_on`]);
/// of several, a CPU adapter is not offered the tiles meant for GPUs
/// ([`MatmulTile::for_gpus_only`]); one named alone is forced, and runs wherever the
/// device can run it. At most [`MAX_CANDIDATES`].
fn offered(ctx: &GpuContext, shape: TunedShape, named: Vec<Variant>) -> Vec<Variant> {
    let runnable: Vec<Variant> = named
        .into_iter()
        .filter(|&v| shape.takes(v) && runs_on(ctx, shape.family, v))
        .collect();
    let cpu_adapter = ctx.is_cpu_adapter();
    let forced = runnable.len() == 1;
    runnable
        .into_iter()
        .filter(|v| forced || !(cpu_adapter && matches!(v, Variant::Tile(t) if t.for_gpus_only())))
        .take(MAX_CANDIDATES)
        .collect()
}

/// The tiles the tuner offers a matmul of `family` and shape `m x k x n` on `ctx`'s
/// device with the default settings (every tile), in the order it times them: those
/// the shape and the device take, without the GPU-only tiles on a CPU adapter, at most
/// 8 (the tuner's bound). Benchmarks use it to time what the tuner would.
pub fn offered_tiles(
    ctx: &GpuContext,
    family: KernelFamily,
    (m, k, n): (u32, u32, u32),
) -> Vec<MatmulTile> {
    let shape = f32_shape(family, (m, k, n));
    let every = MatmulTile::ALL.into_iter().map(Variant::Tile).collect();
    offered(ctx, shape, every)
        .into_iter()
        .filter_map(Variant::tile)
        .collect()
}

/// Whether `ctx`'s device can run `variant` for `family`: a tile whose workgroup its
/// limits allow and that the family runs as itself (`matmul_bt` runs the split tiles
/// and the 64 x 64 tile as others, [`MatmulTile::in_bt`], and the norm-fused matmul
/// the 64 x 64 tile, [`MatmulTile::in_norm`]; a shared-read tile only where
/// [`shares_a_on`]), an attention form its limits allow, any layer norm form.
fn runs_on(ctx: &GpuContext, family: KernelFamily, variant: Variant) -> bool {
    match variant {
        Variant::Tile(t) => {
            let runs_as = match family {
                KernelFamily::BtTiled => t.in_bt(),
                KernelFamily::NormTiled => t.in_norm(),
                _ => t,
            };
            workgroup_fits(ctx, t) && runs_as == t && (!t.shares_a() || shares_a_on(ctx, family))
        }
        Variant::Attention(f) => {
            attention_fits(ctx, f)
                && (!f.needs_subgroups() || subgroups_for(ctx, KernelFamily::Attention))
        }
        Variant::Norm(_) => true,
    }
}

/// Whether `family` on `ctx`'s device is offered the tiles that share their reads of A
/// across a subgroup: the tiled matmuls (`matmul` and its fused forms, `matmul_bt`, the
/// norm-fused matmul), on a CPU adapter with subgroups. On a GPU the hardware already serves a workgroup's
/// reads of one address at once, and `shaders/matmul_block_shared.wgsl` assumes that
/// a workgroup's invocations fill its subgroups from lane 0, as CPU adapters run them.
fn shares_a_on(ctx: &GpuContext, family: KernelFamily) -> bool {
    family.is_matmul() && ctx.has_subgroups() && ctx.is_cpu_adapter()
}

/// Whether `family`'s kernels that use subgroups run on `ctx`'s device: the shared-read
/// matmul tiles wherever it has subgroups (they read as the plain tiles in a subgroup
/// narrower than their rows), attention's shared-read query blocks only where every
/// subgroup has at least 8 invocations (they shuffle from lanes 0-7 unconditionally).
fn subgroups_for(ctx: &GpuContext, family: KernelFamily) -> bool {
    match family {
        KernelFamily::Attention => ctx.has_subgroups_of(ATTENTION_SHARED_LANES),
        _ => ctx.has_subgroups(),
    }
}

/// Lanes a subgroup needs for [`AttentionForm::QueryBlocksShared`]
/// (`shaders/attention_blocks_shared.wgsl` reads a head in groups of 8 `vec4`s).
const ATTENTION_SHARED_LANES: u32 = 8;

/// Whether the device's limits allow attention's `form`: its invocations, and for the
/// tiled form its workgroup memory. (The shared-read form also needs subgroups:
/// [`runs_on`].)
fn attention_fits(ctx: &GpuContext, form: AttentionForm) -> bool {
    let l = &ctx.limits;
    let memory = match form {
        AttentionForm::PerQuery | AttentionForm::QueryBlocks | AttentionForm::QueryBlocksShared => {
            0
        }
        AttentionForm::KeyTiles => kernels::TILED_ATTENTION_WORKGROUP_BYTES,
    };
    form.invocations() <= l.max_compute_workgroup_size_x
        && form.invocations() <= l.max_compute_invocations_per_workgroup
        && memory <= l.max_compute_workgroup_storage_size
}

/// Whether the device's limits allow `tile`'s workgroup (`lanes` x `split`
/// invocations).
fn workgroup_fits(ctx: &GpuContext, tile: MatmulTile) -> bool {
    let l = &ctx.limits;
    tile.lanes() <= l.max_compute_workgroup_size_x
        && tile.split() <= l.max_compute_workgroup_size_y
        && tile.lanes() * tile.split() <= l.max_compute_invocations_per_workgroup
}

/// Times each of `tiles` on a matmul of `family` and exact shape `m x k x n` on `ctx`
/// as the tuner does (each built and warmed by one dispatch, then `repetitions` rounds,
/// at most 8, each dispatching every tile once alone in a pass with GPU timestamps, in
/// an order rotated from round to round): each tile's fastest round, in the order of
/// `tiles` (a tile that could not be built or run is left out, with a warning).
/// Benchmarks use it to time one kernel against another on the same shape.
///
/// # Errors
/// [`ExecError::Device`] without timestamp queries, for operands too large to time
/// (more than 512 MiB, or over the binding limit) or when wgpu fails.
pub fn time_tiles(
    ctx: &GpuContext,
    family: KernelFamily,
    (m, k, n): (u32, u32, u32),
    tiles: &[MatmulTile],
    repetitions: u32,
) -> Result<Vec<(MatmulTile, Duration)>, ExecError> {
    let shape = f32_shape(family, (m, k, n));
    time_as(ctx, shape, tiles, Variant::Tile, Variant::tile, repetitions)
}

/// Times each attention form on `seq` queries of `heads` heads `head_dim` wide in f32
/// on `ctx` as the tuner does, in interleaved rounds (see [`time_tiles`]): each form's
/// fastest round. A form that does not take the head width is left out.
///
/// # Errors
/// As [`time_tiles`].
pub fn time_attention(
    ctx: &GpuContext,
    (seq, heads, head_dim): (u32, u32, u32),
    forms: &[AttentionForm],
    repetitions: u32,
) -> Result<Vec<(AttentionForm, Duration)>, ExecError> {
    let shape = f32_shape(KernelFamily::Attention, (seq, head_dim, heads));
    let fitting: Vec<AttentionForm> = forms
        .iter()
        .copied()
        .filter(|&f| {
            let form = Variant::Attention(f);
            shape.takes(form) && runs_on(ctx, KernelFamily::Attention, form)
        })
        .collect();
    time_as(
        ctx,
        shape,
        &fitting,
        Variant::Attention,
        Variant::form,
        repetitions,
    )
}

/// Times each layer norm form on `rows` rows of `cols` in f32 on `ctx` as the tuner
/// does, in interleaved rounds (see [`time_tiles`]): each form's fastest round. A form
/// that does not take the shape is left out.
///
/// # Errors
/// As [`time_tiles`].
pub fn time_norm(
    ctx: &GpuContext,
    (rows, cols): (u32, u32),
    forms: &[NormForm],
    repetitions: u32,
) -> Result<Vec<(NormForm, Duration)>, ExecError> {
    let shape = f32_shape(KernelFamily::LayerNorm, (rows, cols, 1));
    let fitting: Vec<NormForm> = forms
        .iter()
        .copied()
        .filter(|&f| shape.takes(Variant::Norm(f)))
        .collect();
    time_as(
        ctx,
        shape,
        &fitting,
        Variant::Norm,
        Variant::norm,
        repetitions,
    )
}

/// The f32 shape of `family` with dimensions `(m, k, n)`.
fn f32_shape(family: KernelFamily, (m, k, n): (u32, u32, u32)) -> TunedShape {
    TunedShape {
        family,
        storage: StorageType::F32,
        m,
        k,
        n,
    }
}

/// Times `candidates` (wrapped as variants by `wrap`, unwrapped by `unwrap`) on
/// `shape` as the tuner does.
fn time_as<V: Copy>(
    ctx: &GpuContext,
    shape: TunedShape,
    candidates: &[V],
    wrap: fn(V) -> Variant,
    unwrap: fn(Variant) -> Option<V>,
    repetitions: u32,
) -> Result<Vec<(V, Duration)>, ExecError> {
    let variants: Vec<Variant> = candidates.iter().copied().map(wrap).collect();
    let timed = time_candidates(ctx, shape, &variants, repetitions, None)?;
    Ok(timed
        .times
        .into_iter()
        .filter_map(|(v, d)| Some((unwrap(v)?, d)))
        .collect())
}

/// The candidate to keep from `times`: the fastest, unless the rule's (when timed) is
/// within [`RULE_MARGIN`] of it, so that timing noise does not flip a choice the rule
/// already makes well.
pub(crate) fn fastest<V: Copy + PartialEq>(times: &[(V, Duration)], rule: V) -> Option<V> {
    let &(best, best_time) = times.iter().min_by_key(|(_, d)| *d)?;
    let rule_time = times.iter().find(|(t, _)| *t == rule).map(|&(_, d)| d);
    match rule_time {
        Some(r) if r.as_secs_f64() <= best_time.as_secs_f64() * (1.0 + RULE_MARGIN) => Some(rule),
        _ => Some(best),
    }
}

/// Times each candidate on `shape` in interleaved rounds: every candidate is built
/// (its pipeline and bind group) and dispatched once to warm it, in order; then
/// `repetitions` rounds (at least 1, at most [`MAX_REPETITIONS`]) each time every
/// candidate once, in an order that rotates from round to round ([`rounds::round_orders`]);
/// a candidate whose warm-up was slower than [`SLOW_DISPATCH`] is timed in the first round
/// only. Each candidate's fastest round is kept ([`rounds::best`]).
///
/// The deadline is checked before each candidate is built: past it the candidates left
/// are not built and nothing is timed ([`Timed::cut`]). Once every candidate is built,
/// the first round runs, and the deadline is checked again before each later one (a
/// round cut off this way leaves the rounds already run, the same number for every
/// candidate, and no cut).
fn time_candidates(
    ctx: &GpuContext,
    shape: TunedShape,
    candidates: &[Variant],
    repetitions: u32,
    deadline: Option<Instant>,
) -> Result<Timed, ExecError> {
    let timer = PassTimer::new(ctx).ok_or_else(|| {
        ExecError::Device(DeviceError::Internal {
            message: "no timestamp queries".into(),
        })
    })?;
    let (call, sizes) = shape.call();
    let (uniform, buffers) = operands(ctx, shape, &call, &sizes)?;
    let registry = SharedRegistry::of(ctx);
    let bench = TileBench {
        ctx,
        timer: &timer,
        registry: &registry,
        call: &call,
        shape,
        uniform: &uniform,
        buffers: &buffers,
    };
    let past = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut warmed = Vec::with_capacity(candidates.len());
    for &variant in candidates {
        // Past the deadline the rest are not built or timed: on a CPU adapter building
        // a pipeline (an LLVM compile) costs more than timing it.
        if past() {
            return Ok(Timed {
                times: Vec::new(),
                cut: true,
            });
        }
        // A candidate that cannot be built or run is left out, with a warning; the
        // others are still compared (none left: the rule decides).
        match bench.warm(variant) {
            Ok(ready) => warmed.push(ready),
            Err(e) => log::warn!("{} for {shape:?} was not timed: {e}", variant.name()),
        }
    }
    let once: Vec<bool> = warmed.iter().map(|w| w.warm_up > SLOW_DISPATCH).collect();
    let samples = rounds::time_in_rounds(&once, repetitions.min(MAX_REPETITIONS), past, |c| {
        let ready = &warmed[c];
        bench
            .dispatch(ready)
            .map_err(|e| log::warn!("{} for {shape:?} was not timed: {e}", ready.variant.name()))
            .ok()
    });
    let times = warmed
        .iter()
        .zip(samples)
        .filter_map(|(ready, s)| Some((ready.variant, rounds::best(&s?)?)))
        .collect();
    Ok(Timed { times, cut: false })
}

/// The scratch operands `call` is timed on (`sizes` elements each, in binding order) and
/// its parameter block.
///
/// # Errors
/// [`ExecError::Device`] for operands over [`MAX_TUNE_BYTES`] in all or over the device's
/// storage binding limit, or when wgpu fails.
fn operands(
    ctx: &GpuContext,
    shape: TunedShape,
    call: &OpCall,
    sizes: &[u64],
) -> Result<(wgpu::Buffer, Vec<wgpu::Buffer>), ExecError> {
    let element = shape.storage.dtype().size();
    let bytes: u64 = sizes.iter().map(|s| s * element).sum();
    let too_large = sizes
        .iter()
        .any(|s| s * element > ctx.limits.max_storage_buffer_binding_size);
    if bytes > MAX_TUNE_BYTES || too_large {
        return Err(ExecError::Device(DeviceError::Internal {
            message: format!("{bytes} bytes of operands is too large to tune"),
        }));
    }
    let device = &ctx.device;
    let mut packer = UniformPacker::new(ctx.limits.min_uniform_buffer_offset_alignment)?;
    packer.push(&KernelParams::for_call(call))?;
    scoped(device, 0, || {
        let uniform = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgalloc tune params"),
            size: (packer.bytes().len() as u64).max(PARAMS_SIZE),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        ctx.queue.write_buffer(&uniform, 0, packer.bytes());
        let buffers: Vec<wgpu::Buffer> = sizes
            .iter()
            .map(|&elements| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("wgalloc tune operand"),
                    size: (elements * element).next_multiple_of(4).max(16),
                    usage: wgpu::BufferUsages::STORAGE,
                    mapped_at_creation: false,
                })
            })
            .collect();
        (uniform, buffers)
    })
    .map_err(ExecError::Device)
}

/// What [`time_candidates`] measured: each candidate's fastest round (a candidate that
/// could not be built or run is left out), and whether the deadline stopped it before
/// every candidate was built (then nothing is timed).
struct Timed {
    times: Vec<(Variant, Duration)>,
    cut: bool,
}

/// One tuning measurement's device state: the call, its operands and parameters.
struct TileBench<'a> {
    ctx: &'a GpuContext,
    timer: &'a PassTimer,
    registry: &'a SharedRegistry,
    call: &'a OpCall,
    shape: TunedShape,
    uniform: &'a wgpu::Buffer,
    buffers: &'a [wgpu::Buffer],
}

/// A candidate built and warmed, ready to be timed: its pipeline, bind group and grid,
/// and how long its warm-up dispatch took.
struct Ready {
    variant: Variant,
    pipeline: wgpu::ComputePipeline,
    group: wgpu::BindGroup,
    grid: [u32; 3],
    warm_up: Duration,
}

impl TileBench<'_> {
    /// `variant` built (its pipeline, bind group and grid) and dispatched once.
    fn warm(&self, variant: Variant) -> Result<Ready, ExecError> {
        let device = &self.ctx.device;
        let pick = variant.pick();
        let (kernel, _) = kernels::select_with(self.call, false, pick).ok_or_else(|| {
            ExecError::Device(DeviceError::Internal {
                message: format!("no kernel for {:?}", self.call),
            })
        })?;
        let (pipeline, layout) = self.registry.with(|r| {
            let pipeline = r.pipeline_for(device, kernel, self.shape.storage)?;
            Ok::<_, ExecError>((pipeline, r.layout(device, kernel.storage_bindings())))
        })?;
        let grid = kernels::workgroups_with(
            self.call,
            0,
            self.ctx.limits.max_compute_workgroups_per_dimension,
            pick,
        )?;
        let group = scoped(device, 0, || self.bind_group(&layout)).map_err(ExecError::Device)?;
        let mut ready = Ready {
            variant,
            pipeline,
            group,
            grid,
            warm_up: Duration::ZERO,
        };
        ready.warm_up = self.dispatch(&ready)?;
        Ok(ready)
    }

    /// The bind group of the parameters and operands under `layout`.
    fn bind_group(&self, layout: &wgpu::BindGroupLayout) -> wgpu::BindGroup {
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: self.uniform,
                offset: 0,
                size: wgpu::BufferSize::new(PARAMS_SIZE),
            }),
        }];
        for (i, buffer) in self.buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: buffer.as_entire_binding(),
            });
        }
        self.ctx
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("wgalloc tune"),
                layout,
                entries: &entries,
            })
    }

    /// One dispatch of `ready` alone in a pass with GPU timestamps: its GPU time (waits
    /// for it).
    fn dispatch(&self, ready: &Ready) -> Result<Duration, ExecError> {
        let device = &self.ctx.device;
        let commands = scoped(device, 0, || {
            let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgalloc tune"),
            });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("wgalloc tune"),
                    timestamp_writes: Some(self.timer.writes()),
                });
                pass.set_pipeline(&ready.pipeline);
                pass.set_bind_group(0, &ready.group, &[0]);
                let [x, y, z] = ready.grid;
                pass.dispatch_workgroups(x, y, z);
            }
            self.timer.resolve(&mut encoder);
            self.ctx.queue.submit([encoder.finish()]);
        });
        commands.map_err(ExecError::Device)?;
        self.timer.read(self.ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<PathBuf> {
        let map: HashMap<String, PathBuf> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_cache_file_follows_the_variables() {
        let s = TuneSettings::from_vars(vars(&[("HOME", "/h")]));
        assert!(s.enabled);
        assert_eq!(s.cache, Some(PathBuf::from("/h/.cache/wgalloc/tune.json")));
        let s = TuneSettings::from_vars(vars(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]));
        assert_eq!(s.cache, Some(PathBuf::from("/x/wgalloc/tune.json")));
        let s =
            TuneSettings::from_vars(vars(&[("HOME", "/h"), ("WGALLOC_TUNE_CACHE", "/c/t.json")]));
        assert_eq!(s.cache, Some(PathBuf::from("/c/t.json")));
        assert_eq!(TuneSettings::from_vars(vars(&[])).cache, None);
    }

    #[test]
    fn wgalloc_decode_slices_forces_the_decode_width() {
        let decode =
            |v: &str| TuneSettings::from_vars(vars(&[("WGALLOC_DECODE_SLICES", v)])).decode;
        assert_eq!(decode("16"), Some(DecodeSlices::Queries));
        assert_eq!(decode(" 256 "), Some(DecodeSlices::Wide));
        assert_eq!(decode("64"), None);
        assert_eq!(TuneSettings::from_vars(vars(&[])).decode, None);
        assert_eq!(DecodeSlices::rule(true), DecodeSlices::Queries);
        assert_eq!(DecodeSlices::rule(false), DecodeSlices::Wide);
    }

    #[test]
    fn wgalloc_tune_0_turns_tuning_off() {
        for off in ["0", "off", "FALSE", "no"] {
            assert!(!TuneSettings::from_vars(vars(&[("WGALLOC_TUNE", off)])).enabled);
        }
        assert!(TuneSettings::from_vars(vars(&[("WGALLOC_TUNE", "1")])).enabled);
    }

    #[test]
    fn the_rule_s_tile_stays_unless_another_is_clearly_faster() {
        let ms = Duration::from_millis;
        let (r8, r4) = (MatmulTile::Rows8, MatmulTile::Rows4);
        assert_eq!(fastest(&[(r8, ms(100)), (r4, ms(97))], r8), Some(r8));
        assert_eq!(fastest(&[(r8, ms(100)), (r4, ms(80))], r8), Some(r4));
        assert_eq!(fastest(&[(r4, ms(80))], r8), Some(r4));
        assert_eq!(fastest(&[], r8), None);
    }

    #[test]
    fn shape_classes_round_up_to_powers_of_two() {
        let call = OpCall::Matmul {
            m: 100,
            k: 768,
            n: 3072,
            transposed_b: false,
        };
        let shape = TunedShape::of(&call, StorageType::F32).expect("tiled");
        assert_eq!(
            shape.class(),
            ShapeClass {
                family: KernelFamily::Tiled,
                storage: StorageType::F32,
                m: 128,
                k: 1024,
                n: 4096
            }
        );
        let odd = OpCall::Matmul {
            m: 3,
            k: 5,
            n: 7,
            transposed_b: false,
        };
        assert_eq!(TunedShape::of(&odd, StorageType::F32), None);
        // f16 kernels are a class of their own.
        let half = TunedShape::of(&call, StorageType::F16).expect("tiled");
        assert_ne!(half.class(), shape.class());
        assert_eq!(half.class().storage, StorageType::F16);
    }

    #[test]
    fn attention_is_a_class_of_its_own_with_the_per_query_rule() {
        let call = OpCall::Attention {
            seq: 100,
            heads: 12,
            head_dim: 64,
            scale: 0.125,
        };
        let shape = TunedShape::of(&call, StorageType::F32).expect("tuned");
        assert_eq!(
            shape.class(),
            ShapeClass {
                family: KernelFamily::Attention,
                storage: StorageType::F32,
                m: 128,
                k: 64,
                n: 16
            }
        );
        // By adapter type: a block of queries per invocation on a CPU adapter, its
        // reads shared across a subgroup where it has subgroups.
        assert_eq!(
            shape.rule(false, false),
            Variant::Attention(AttentionForm::PerQuery)
        );
        assert_eq!(
            shape.rule(true, true),
            Variant::Attention(AttentionForm::QueryBlocksShared)
        );
        assert_eq!(
            shape.rule(true, false),
            Variant::Attention(AttentionForm::QueryBlocks)
        );
        // A 128-wide head (class 128) does not take the key tiles; a 48-wide one
        // (class 64) does, as every head of its class.
        let wide = TunedShape { k: 128, ..shape };
        assert!(!wide.takes(Variant::Attention(AttentionForm::KeyTiles)));
        let narrow = TunedShape { k: 48, ..shape };
        assert!(narrow.takes(Variant::Attention(AttentionForm::KeyTiles)));
        assert!(!narrow.takes(Variant::Tile(MatmulTile::Rows8)));
        // The timed call is the same attention, over qkv [seq, 3d] into out [seq, d].
        let (timed, sizes) = shape.call();
        assert!(matches!(
            timed,
            OpCall::Attention {
                seq: 100,
                heads: 12,
                head_dim: 64,
                ..
            }
        ));
        assert_eq!(sizes, [3 * 100 * 768, 100 * 768]);
    }

    #[test]
    fn a_tiled_matmul_s_rule_shares_a_s_reads_on_a_cpu_adapter_with_subgroups() {
        let call = OpCall::Matmul {
            m: 128,
            k: 256,
            n: 768,
            transposed_b: true,
        };
        let shape = TunedShape::of(&call, StorageType::F32).expect("tuned");
        let plain = Variant::Tile(MatmulTile::choose(128, 768));
        assert_eq!(
            shape.rule(true, true),
            Variant::Tile(MatmulTile::Rows32Shared)
        );
        // Without subgroups, or on a GPU, the plain rule.
        assert_eq!(shape.rule(true, false), plain);
        assert_eq!(shape.rule(false, true), plain);
        assert_eq!(shape.rule(false, false), plain);
    }

    #[test]
    fn variant_names_round_trip_and_are_apart() {
        let all: Vec<Variant> = MatmulTile::ALL
            .into_iter()
            .map(Variant::Tile)
            .chain(AttentionForm::ALL.into_iter().map(Variant::Attention))
            .chain(NormForm::ALL.into_iter().map(Variant::Norm))
            .collect();
        for v in &all {
            assert_eq!(Variant::from_name(v.name()), Some(*v));
        }
        let mut names: Vec<&str> = all.iter().map(|v| v.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(Variant::from_name("rows16"), None);
    }

    #[test]
    fn a_layer_norm_is_a_class_whose_rule_follows_the_adapter_type() {
        let norm = |rows| OpCall::LayerNorm {
            rows,
            cols: 512,
            eps: 1e-5,
        };
        let shape = TunedShape::of(&norm(256), StorageType::F16).expect("tuned");
        assert_eq!(
            shape.class(),
            ShapeClass {
                family: KernelFamily::LayerNorm,
                storage: StorageType::F16,
                m: 256,
                k: 512,
                n: 1
            }
        );
        let rows = Variant::Norm(NormForm::InvocationPerRow);
        let workgroup = Variant::Norm(NormForm::WorkgroupPerRow);
        assert_eq!(shape.rule(true, true), rows);
        assert_eq!(shape.rule(false, false), workgroup);
        // Too few rows to fill the row-per-invocation workgroups: a workgroup per row.
        let few = TunedShape::of(&norm(8), StorageType::F32).expect("tuned");
        assert_eq!(few.rule(true, false), workgroup);
        assert!(!rows.pick().norm_rows.eq(&workgroup.pick().norm_rows));
        assert!(rows.is_for(KernelFamily::LayerNorm) && !rows.is_for(KernelFamily::Tiled));
        let (_, sizes) = shape.call();
        assert_eq!(sizes, [256 * 512, 512, 256 * 512, 512]);
        // Rows round down: 40 rows (no row per invocation) are a class apart from 64
        // (which take one), and every shape of a class takes the same forms.
        let class_of = |r| {
            TunedShape::of(&norm(r), StorageType::F32)
                .expect("tuned")
                .class()
                .m
        };
        assert_eq!(
            (class_of(40), class_of(63), class_of(64), class_of(127)),
            (32, 32, 64, 64)
        );
        for r in [1, 8, 40, 63, 64, 100, 127, 128, 1000] {
            let s = TunedShape::of(&norm(r), StorageType::F32).expect("tuned");
            let low = TunedShape {
                m: s.class().m,
                ..s
            };
            assert_eq!(s.takes(rows), low.takes(rows), "{r} rows");
        }
    }
}

//! [`DeviceBufferTypes`]: the kinds of memory a device offers, derived from its limits
//! and described as the planner's [`BufferTypeDesc`].

use serde::Serialize;

use super::DeviceError;
use crate::plan::BufferTypeDesc;

/// Alignment of the host-memory buffer type: a cache line, so that tensors placed in
/// CPU memory can be read with aligned vector loads.
pub const HOST_ALIGNMENT: u64 = 64;

/// Largest host-memory buffer: the largest allocation Rust permits (`isize::MAX` bytes).
pub const HOST_MAX_SIZE: u64 = isize::MAX as u64;

pub use crate::storage::STORAGE_USAGE;

/// Usage of uniform buffers (per-dispatch parameters).
pub const UNIFORM_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::UNIFORM.union(wgpu::BufferUsages::COPY_DST);

/// Usage of readback staging buffers.
pub const STAGING_USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

/// One kind of memory: the planner's description plus the wgpu usage it is created
/// with (empty for host memory, which is not a wgpu buffer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceBufferType {
    /// Name, alignment and max size as the planner sees them.
    pub desc: BufferTypeDesc,
    /// The usage a `wgpu::Buffer` of this type is created with.
    #[serde(serialize_with = "serialize_usage")]
    pub usage: wgpu::BufferUsages,
}

/// The flag names of a usage joined with ` | ` (`STORAGE | COPY_SRC`), `none` when empty.
pub fn usage_names(usage: wgpu::BufferUsages) -> String {
    let names: Vec<&str> = usage.iter_names().map(|(name, _)| name).collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(" | ")
    }
}

fn serialize_usage<S: serde::Serializer>(
    usage: &wgpu::BufferUsages,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&usage_names(*usage))
}

/// The buffer types of one device, each a pure function of its `wgpu::Limits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceBufferTypes {
    /// Storage buffers: alignment `min_storage_buffer_offset_alignment`, max size
    /// `min(max_buffer_size, max_storage_buffer_binding_size)` so that a whole chunk
    /// can be bound at once.
    pub storage: DeviceBufferType,
    /// Uniform buffers: alignment `min_uniform_buffer_offset_alignment`, max size
    /// `min(max_buffer_size, max_uniform_buffer_binding_size)`.
    pub uniform: DeviceBufferType,
    /// Readback staging buffers (`MAP_READ | COPY_DST`): alignment
    /// `wgpu::COPY_BUFFER_ALIGNMENT`, max size `max_buffer_size`.
    pub staging: DeviceBufferType,
    /// Host (CPU) memory: alignment 64 bytes (a cache line), max size `isize::MAX` bytes.
    pub host: DeviceBufferType,
}

fn alignment(limit: &'static str, value: u32) -> Result<u64, DeviceError> {
    let value = u64::from(value);
    if value.is_power_of_two() {
        Ok(value)
    } else {
        Err(DeviceError::BadLimit { limit, value })
    }
}

fn max_size(limit: &'static str, value: u64) -> Result<u64, DeviceError> {
    if value == 0 {
        Err(DeviceError::BadLimit { limit, value })
    } else {
        Ok(value)
    }
}

fn buffer_type(
    name: &str,
    alignment: u64,
    max_size: u64,
    usage: wgpu::BufferUsages,
) -> Result<DeviceBufferType, DeviceError> {
    // Alignment and max size were checked above, so the planner accepts them; the
    // mapping keeps the error typed should its rules ever grow.
    let desc =
        BufferTypeDesc::new(name, alignment, max_size).map_err(|_| DeviceError::BadLimit {
            limit: "buffer type",
            value: alignment,
        })?;
    Ok(DeviceBufferType { desc, usage })
}

impl DeviceBufferTypes {
    /// The buffer types a device with these limits offers.
    ///
    /// # Errors
    /// [`DeviceError::BadLimit`] when an offset alignment is not a power of two or a
    /// size limit is zero (wgpu never reports such limits for a real adapter, but a
    /// hand-made `Limits` can hold them).
    pub fn from_limits(limits: &wgpu::Limits) -> Result<DeviceBufferTypes, DeviceError> {
        let buffer = max_size("max_buffer_size", limits.max_buffer_size)?;
        let storage_binding = max_size(
            "max_storage_buffer_binding_size",
            limits.max_storage_buffer_binding_size,
        )?;
        let uniform_binding = max_size(
            "max_uniform_buffer_binding_size",
            limits.max_uniform_buffer_binding_size,
        )?;
        let storage_alignment = alignment(
            "min_storage_buffer_offset_alignment",
            limits.min_storage_buffer_offset_alignment,
        )?;
        let uniform_alignment = alignment(
            "min_uniform_buffer_offset_alignment",
            limits.min_uniform_buffer_offset_alignment,
        )?;
        Ok(DeviceBufferTypes {
            storage: buffer_type(
                "storage",
                storage_alignment,
                buffer.min(storage_binding),
                STORAGE_USAGE,
            )?,
            uniform: buffer_type(
                "uniform",
                uniform_alignment,
                buffer.min(uniform_binding),
                UNIFORM_USAGE,
            )?,
            staging: buffer_type(
                "staging",
                wgpu::COPY_BUFFER_ALIGNMENT,
                buffer,
                STAGING_USAGE,
            )?,
            host: buffer_type(
                "host",
                HOST_ALIGNMENT,
                HOST_MAX_SIZE,
                wgpu::BufferUsages::empty(),
            )?,
        })
    }

    /// The four types in a fixed order: storage, uniform, staging, host.
    pub fn all(&self) -> [&DeviceBufferType; 4] {
        [&self.storage, &self.uniform, &self.staging, &self.host]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// What lavapipe (Mesa 22.3) reports: buffers one byte short of 2 GiB.
    fn lavapipe_limits() -> wgpu::Limits {
        wgpu::Limits {
            max_buffer_size: 2 * GIB - 1,
            max_storage_buffer_binding_size: 128 * MIB,
            max_uniform_buffer_binding_size: 64 * 1024,
            min_storage_buffer_offset_alignment: 32,
            min_uniform_buffer_offset_alignment: 32,
            ..wgpu::Limits::default()
        }
    }

    #[test]
    fn storage_type_takes_lavapipe_binding_size_and_alignment() {
        let types = DeviceBufferTypes::from_limits(&lavapipe_limits()).unwrap();
        assert_eq!(types.storage.desc.alignment(), 32);
        assert_eq!(types.storage.desc.max_size, 128 * MIB);
        assert_eq!(types.storage.desc.name, "storage");
        assert!(types.storage.usage.contains(wgpu::BufferUsages::STORAGE));
    }

    #[test]
    fn staging_type_takes_whole_buffer_size_and_copy_alignment() {
        let types = DeviceBufferTypes::from_limits(&lavapipe_limits()).unwrap();
        assert_eq!(types.staging.desc.alignment(), 4);
        assert_eq!(types.staging.desc.max_size, 2 * GIB - 1);
        assert_eq!(
            types.staging.usage,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST
        );
    }

    #[test]
    fn uniform_type_takes_uniform_limits() {
        let types = DeviceBufferTypes::from_limits(&lavapipe_limits()).unwrap();
        assert_eq!(types.uniform.desc.alignment(), 32);
        assert_eq!(types.uniform.desc.max_size, 64 * 1024);
    }

    #[test]
    fn storage_max_size_is_buffer_size_when_binding_is_larger() {
        let limits = wgpu::Limits {
            max_buffer_size: 4 * GIB,
            max_storage_buffer_binding_size: 8 * GIB,
            ..wgpu::Limits::default()
        };
        let types = DeviceBufferTypes::from_limits(&limits).unwrap();
        assert_eq!(types.storage.desc.max_size, 4 * GIB);
    }

    #[test]
    fn wgpu_default_limits_give_256_byte_alignment() {
        let defaults = wgpu::Limits::default();
        let types = DeviceBufferTypes::from_limits(&defaults).unwrap();
        assert_eq!(types.storage.desc.alignment(), 256);
        assert_eq!(
            types.storage.desc.max_size,
            defaults
                .max_buffer_size
                .min(defaults.max_storage_buffer_binding_size)
        );
        assert_eq!(types.uniform.desc.alignment(), 256);
    }

    #[test]
    fn host_type_is_independent_of_the_device() {
        let a = DeviceBufferTypes::from_limits(&lavapipe_limits()).unwrap();
        let b = DeviceBufferTypes::from_limits(&wgpu::Limits::downlevel_defaults()).unwrap();
        assert_eq!(a.host, b.host);
        assert_eq!(a.host.desc.alignment(), HOST_ALIGNMENT);
        assert_eq!(a.host.desc.max_size, HOST_MAX_SIZE);
        assert!(a.host.usage.is_empty());
    }

    #[test]
    fn non_power_of_two_alignment_is_a_bad_limit() {
        let limits = wgpu::Limits {
            min_storage_buffer_offset_alignment: 48,
            ..lavapipe_limits()
        };
        assert_eq!(
            DeviceBufferTypes::from_limits(&limits),
            Err(DeviceError::BadLimit {
                limit: "min_storage_buffer_offset_alignment",
                value: 48
            })
        );
    }

    #[test]
    fn zero_binding_size_is_a_bad_limit() {
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: 0,
            ..lavapipe_limits()
        };
        assert!(matches!(
            DeviceBufferTypes::from_limits(&limits),
            Err(DeviceError::BadLimit {
                limit: "max_storage_buffer_binding_size",
                value: 0
            })
        ));
    }

    #[test]
    fn usage_names_join_flags_and_name_the_empty_set() {
        assert_eq!(usage_names(STAGING_USAGE), "MAP_READ | COPY_DST");
        assert_eq!(usage_names(wgpu::BufferUsages::empty()), "none");
    }

    #[test]
    fn all_lists_the_four_types_in_order() {
        let types = DeviceBufferTypes::from_limits(&lavapipe_limits()).unwrap();
        let names: Vec<&str> = types.all().iter().map(|t| t.desc.name.as_str()).collect();
        assert_eq!(names, ["storage", "uniform", "staging", "host"]);
    }
}

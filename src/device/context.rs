//! [`GpuContext`]: the adapter, device and queue wgalloc works on, chosen from the
//! environment or adopted from the caller.

use super::{DeviceError, DeviceShared};

/// A wgpu device and queue with the limits they were created with and a description of
/// the adapter behind them.
#[derive(Debug, Clone)]
pub struct GpuContext {
    /// The adapter's description (name, backend, type, driver).
    pub info: wgpu::AdapterInfo,
    /// The device's limits: the adapter's real limits when wgalloc created the device,
    /// or whatever the caller requested when the device was adopted.
    pub limits: wgpu::Limits,
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// Objects every runner on this device shares (compiled pipelines); clones of the
    /// context share them too.
    pub shared: DeviceShared,
}

/// The backends to search: `WGPU_BACKEND` when set, else every backend compiled in.
/// A value naming no known backend gives the empty set (see [`parse_backends`] for a
/// checked reading).
pub fn backends_from_env() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all())
}

/// Reads a `WGPU_BACKEND` value (`vulkan`, `vk`, `dx12`, `metal`, `gl`, comma
/// separated, case-insensitive); `None` or an empty value means every backend.
///
/// # Errors
/// [`DeviceError::BadBackend`] when the value names no known backend.
pub fn parse_backends(value: Option<&str>) -> Result<wgpu::Backends, DeviceError> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(wgpu::Backends::all()),
        Some(v) => {
            let backends = wgpu::Backends::from_comma_list(v);
            if backends.is_empty() {
                Err(DeviceError::BadBackend {
                    value: v.to_string(),
                })
            } else {
                Ok(backends)
            }
        }
    }
}

fn checked_backends_from_env() -> Result<wgpu::Backends, DeviceError> {
    parse_backends(std::env::var("WGPU_BACKEND").ok().as_deref())
}

/// The index of the first adapter whose name contains `wanted`, ignoring case and
/// surrounding whitespace.
pub fn match_adapter(names: &[&str], wanted: &str) -> Option<usize> {
    let needle = wanted.trim().to_lowercase();
    names
        .iter()
        .position(|name| name.to_lowercase().contains(&needle))
}

/// How an adapter is listed in errors: `name (Backend)`.
pub fn describe_adapter(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?})", info.name, info.backend)
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds on the backends of [`backends_from_env`].
pub fn list_adapters() -> Vec<wgpu::AdapterInfo> {
    let backends = backends_from_env();
    let instance = instance(backends);
    pollster::block_on(instance.enumerate_adapters(backends))
        .iter()
        .map(|a| a.get_info())
        .collect()
}

impl GpuContext {
    /// Picks an adapter and creates a device with the adapter's real limits.
    ///
    /// `WGPU_BACKEND` restricts the backends searched; `WGPU_ADAPTER_NAME` picks the
    /// first adapter whose name contains it (case-insensitive). Otherwise the
    /// high-performance adapter is chosen. `WGALLOC_SHADER_F16=0` leaves f16 out of
    /// the device's features even where the adapter offers it (f16 models then fall
    /// back to f32, as on an adapter without it; [`features_from_env`]).
    ///
    /// # Errors
    /// [`DeviceError::BadBackend`] when `WGPU_BACKEND` names no known backend;
    /// [`DeviceError::NoAdapter`] when wgpu finds none; [`DeviceError::AdapterNotFound`]
    /// listing the adapters found when `WGPU_ADAPTER_NAME` matches none of them;
    /// [`DeviceError::RequestDevice`] when the adapter refuses the device.
    pub fn from_env() -> Result<GpuContext, DeviceError> {
        let wanted = std::env::var("WGPU_ADAPTER_NAME")
            .ok()
            .filter(|s| !s.is_empty());
        Self::select(wanted.as_deref())
    }

    /// Like [`GpuContext::from_env`] with an explicit adapter name filter (`None`: the
    /// high-performance adapter).
    ///
    /// # Errors
    /// As [`GpuContext::from_env`].
    pub fn select(adapter_name: Option<&str>) -> Result<GpuContext, DeviceError> {
        Self::select_with(adapter_name, features_from_env())
    }

    /// [`GpuContext::select`] asking for the features of `features` only (see
    /// [`GpuContext::from_adapter_with`]): say, [`USABLE_FEATURES`] without
    /// `SHADER_F16` for a device that runs f32 kernels only.
    ///
    /// # Errors
    /// As [`GpuContext::from_env`].
    pub fn select_with(
        adapter_name: Option<&str>,
        features: wgpu::Features,
    ) -> Result<GpuContext, DeviceError> {
        let backends = checked_backends_from_env()?;
        let instance = instance(backends);
        let adapters = pollster::block_on(instance.enumerate_adapters(backends));
        if adapters.is_empty() {
            return Err(DeviceError::NoAdapter {
                backends: format!("{backends:?}"),
            });
        }
        let wanted = adapter_name.map(str::trim).filter(|n| !n.is_empty());
        let adapter = match wanted {
            Some(name) => {
                let infos: Vec<wgpu::AdapterInfo> = adapters.iter().map(|a| a.get_info()).collect();
                let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
                let index =
                    match_adapter(&names, name).ok_or_else(|| DeviceError::AdapterNotFound {
                        wanted: name.to_string(),
                        found: infos.iter().map(describe_adapter).collect(),
                    })?;
                adapters.get(index).cloned().ok_or(DeviceError::NoAdapter {
                    backends: format!("{backends:?}"),
                })?
            }
            None => {
                match pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    ..Default::default()
                })) {
                    Ok(adapter) => adapter,
                    Err(_) => adapters.first().cloned().ok_or(DeviceError::NoAdapter {
                        backends: format!("{backends:?}"),
                    })?,
                }
            }
        };
        Self::from_adapter_with(&adapter, features)
    }

    /// Creates a device on `adapter` with the adapter's real limits (not wgpu's
    /// defaults) and the features wgalloc can use when present ([`USABLE_FEATURES`]:
    /// timestamp queries, f16 in shaders).
    ///
    /// # Errors
    /// [`DeviceError::RequestDevice`] when the adapter refuses.
    pub fn from_adapter(adapter: &wgpu::Adapter) -> Result<GpuContext, DeviceError> {
        Self::from_adapter_with(adapter, USABLE_FEATURES)
    }

    /// [`GpuContext::from_adapter`] asking only for the features of `wanted` that the
    /// adapter has (say, [`USABLE_FEATURES`] without `SHADER_F16` for a device that runs
    /// f32 kernels only, as on an adapter without f16).
    ///
    /// # Errors
    /// [`DeviceError::RequestDevice`] when the adapter refuses.
    pub fn from_adapter_with(
        adapter: &wgpu::Adapter,
        wanted: wgpu::Features,
    ) -> Result<GpuContext, DeviceError> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let features = adapter.features() & wanted & USABLE_FEATURES;
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("wgalloc"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| DeviceError::RequestDevice {
            adapter: info.name.clone(),
            message: e.to_string(),
        })?;
        Ok(GpuContext {
            info,
            limits,
            device,
            queue,
            shared: DeviceShared::default(),
        })
    }

    /// Adopts a device and queue the caller already has (`info` from
    /// `adapter.get_info()`). The limits are read from the device: what the caller
    /// requested, which may be below the adapter's.
    pub fn adopt(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> GpuContext {
        let limits = device.limits();
        GpuContext {
            info,
            limits,
            device,
            queue,
            shared: DeviceShared::default(),
        }
    }

    /// The buffer types this device offers, from its limits.
    ///
    /// # Errors
    /// [`DeviceError::BadLimit`] for limits that cannot describe a buffer type (only
    /// possible for an adopted device created with hand-made limits).
    pub fn buffer_types(&self) -> Result<super::DeviceBufferTypes, DeviceError> {
        super::DeviceBufferTypes::from_limits(&self.limits)
    }

    /// Whether the device runs kernels over f16 storage (it was created with
    /// `wgpu::Features::SHADER_F16`, which its adapter offers).
    pub fn has_f16(&self) -> bool {
        self.device.features().contains(wgpu::Features::SHADER_F16)
    }

    /// Whether the device can time GPU work with timestamp queries.
    pub fn has_timestamps(&self) -> bool {
        self.device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// Whether the device runs subgroup operations in shaders (wgpu's `SUBGROUP`).
    pub fn has_subgroups(&self) -> bool {
        self.device.features().contains(wgpu::Features::SUBGROUP)
    }

    /// Whether the device runs subgroup operations in subgroups of at least `width`
    /// invocations (the adapter's `subgroup_min_size`).
    pub fn has_subgroups_of(&self, width: u32) -> bool {
        self.has_subgroups() && self.info.subgroup_min_size >= width
    }

    /// Whether the adapter is a CPU (a software rasterizer such as lavapipe), where
    /// several kernel rules differ from a GPU's.
    pub fn is_cpu_adapter(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }
}

/// The optional features [`GpuContext::from_env`] asks for: [`USABLE_FEATURES`], less
/// `SHADER_F16` when `WGALLOC_SHADER_F16` is `0`.
pub fn features_from_env() -> wgpu::Features {
    match std::env::var("WGALLOC_SHADER_F16") {
        Ok(value) if value.trim() == "0" => USABLE_FEATURES.difference(wgpu::Features::SHADER_F16),
        _ => USABLE_FEATURES,
    }
}

/// The optional features wgalloc requests when the adapter has them: timestamp
/// queries (GPU timing, the tuner), f16 in shaders (f16 storage,
/// [`crate::exec::StorageType::F16`]) and subgroup operations (the matmul tiles that
/// share their reads across a subgroup, [`crate::exec::MatmulTile::shares_a`]).
pub const USABLE_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_name_matches_by_case_insensitive_substring() {
        let names = ["NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"];
        assert_eq!(match_adapter(&names, "LLVMpipe"), Some(1));
        assert_eq!(match_adapter(&names, "h100"), Some(0));
        assert_eq!(match_adapter(&names, "  llvmpipe "), Some(1));
    }

    #[test]
    fn adapter_name_matching_nothing_gives_none() {
        let names = ["llvmpipe (LLVM 15.0.6, 256 bits)"];
        assert_eq!(match_adapter(&names, "radeon"), None);
        assert_eq!(match_adapter(&[], "llvmpipe"), None);
    }

    #[test]
    fn first_matching_adapter_wins() {
        let names = ["llvmpipe (vulkan)", "llvmpipe (gl)"];
        assert_eq!(match_adapter(&names, "llvmpipe"), Some(0));
    }

    #[test]
    fn adapter_not_found_lists_what_was_found() {
        let error = DeviceError::AdapterNotFound {
            wanted: "radeon".into(),
            found: vec!["llvmpipe (Vulkan)".into(), "softpipe (Gl)".into()],
        };
        let text = error.to_string();
        assert!(text.contains("\"radeon\""), "{text}");
        assert!(text.contains("llvmpipe (Vulkan), softpipe (Gl)"), "{text}");
    }

    #[test]
    fn backend_names_parse_case_insensitively() {
        assert_eq!(parse_backends(Some("Vulkan")), Ok(wgpu::Backends::VULKAN));
        assert_eq!(
            parse_backends(Some("vk, gl")),
            Ok(wgpu::Backends::VULKAN | wgpu::Backends::GL)
        );
    }

    #[test]
    fn unset_or_empty_backend_means_all() {
        assert_eq!(parse_backends(None), Ok(wgpu::Backends::all()));
        assert_eq!(parse_backends(Some("  ")), Ok(wgpu::Backends::all()));
    }

    #[test]
    fn unknown_backend_name_is_an_error() {
        assert_eq!(
            parse_backends(Some("vulcan")),
            Err(DeviceError::BadBackend {
                value: "vulcan".into()
            })
        );
    }
}

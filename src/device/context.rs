//! [`GpuContext`]: the adapter, device and queue wgalloc works on, chosen from the
//! environment or adopted from the caller.

use super::DeviceError;

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
}

/// The backends to search: `WGPU_BACKEND` when set, else every backend compiled in.
pub fn backends_from_env() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all())
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends_from_env();
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds on the backends of [`backends_from_env`].
pub fn list_adapters() -> Vec<wgpu::AdapterInfo> {
    let instance = instance();
    pollster::block_on(instance.enumerate_adapters(backends_from_env()))
        .iter()
        .map(|a| a.get_info())
        .collect()
}

impl GpuContext {
    /// Picks an adapter and creates a device with the adapter's real limits.
    ///
    /// `WGPU_BACKEND` restricts the backends searched; `WGPU_ADAPTER_NAME` picks the
    /// first adapter whose name contains it (case-insensitive). Otherwise the
    /// high-performance adapter is chosen.
    ///
    /// # Errors
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
        let backends = backends_from_env();
        let instance = instance();
        let adapters = pollster::block_on(instance.enumerate_adapters(backends));
        if adapters.is_empty() {
            return Err(DeviceError::NoAdapter {
                backends: format!("{backends:?}"),
            });
        }
        let adapter = match adapter_name {
            Some(name) => {
                let needle = name.to_lowercase();
                let found = adapters
                    .iter()
                    .position(|a| a.get_info().name.to_lowercase().contains(&needle));
                match found {
                    Some(i) => adapters[i].clone(),
                    None => {
                        return Err(DeviceError::AdapterNotFound {
                            wanted: name.to_string(),
                            found: adapters
                                .iter()
                                .map(|a| {
                                    let i = a.get_info();
                                    format!("{} ({:?})", i.name, i.backend)
                                })
                                .collect(),
                        })
                    }
                }
            }
            None => pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            }))
            .or_else(|_| adapters.first().cloned().ok_or(()))
            .map_err(|()| DeviceError::NoAdapter {
                backends: format!("{backends:?}"),
            })?,
        };
        Self::from_adapter(&adapter)
    }

    /// Creates a device on `adapter` with the adapter's real limits (not wgpu's
    /// defaults) and the features wgalloc can use when present (timestamp queries).
    ///
    /// # Errors
    /// [`DeviceError::RequestDevice`] when the adapter refuses.
    pub fn from_adapter(adapter: &wgpu::Adapter) -> Result<GpuContext, DeviceError> {
        let info = adapter.get_info();
        let limits = adapter.limits();
        let wanted = wgpu::Features::TIMESTAMP_QUERY;
        let features = adapter.features() & wanted;
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
        }
    }

    /// Whether the device can time GPU work with timestamp queries.
    pub fn has_timestamps(&self) -> bool {
        self.device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
    }
}

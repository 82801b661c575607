//! `wgalloc info`: the adapters wgpu finds, and for the chosen one the limits that
//! matter for memory and the buffer types derived from them.

use std::process::ExitCode;

use serde_json::{json, Value};
use wgalloc::device::{describe_adapter, list_adapters, parse_backends, usage_names, GpuContext};

/// A byte count with its size in the largest binary unit it reaches.
fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 60, "EiB"),
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (unit, name) in UNITS {
        if bytes >= unit {
            if bytes.is_multiple_of(unit) {
                return format!("{bytes} ({} {name})", bytes / unit);
            }
            // Display only: the f64 rounding cannot change a decision.
            let scaled = bytes as f64 / unit as f64;
            return format!("{bytes} (~{scaled:.2} {name})");
        }
    }
    bytes.to_string()
}

fn adapter_json(info: &wgpu::AdapterInfo, chosen: bool) -> Value {
    json!({
        "name": info.name,
        "backend": format!("{:?}", info.backend),
        "device_type": format!("{:?}", info.device_type),
        "driver": info.driver,
        "driver_info": info.driver_info,
        "vendor": info.vendor,
        "device": info.device,
        "chosen": chosen,
    })
}

/// The limits that decide where tensors can live, as (name, value, is a byte size).
fn memory_limits(limits: &wgpu::Limits) -> Vec<(&'static str, u64, bool)> {
    vec![
        ("max_buffer_size", limits.max_buffer_size, true),
        (
            "max_storage_buffer_binding_size",
            limits.max_storage_buffer_binding_size,
            true,
        ),
        (
            "max_uniform_buffer_binding_size",
            limits.max_uniform_buffer_binding_size,
            true,
        ),
        (
            "min_storage_buffer_offset_alignment",
            u64::from(limits.min_storage_buffer_offset_alignment),
            false,
        ),
        (
            "min_uniform_buffer_offset_alignment",
            u64::from(limits.min_uniform_buffer_offset_alignment),
            false,
        ),
        (
            "max_storage_buffers_per_shader_stage",
            u64::from(limits.max_storage_buffers_per_shader_stage),
            false,
        ),
        (
            "max_compute_workgroups_per_dimension",
            u64::from(limits.max_compute_workgroups_per_dimension),
            false,
        ),
        (
            "max_compute_invocations_per_workgroup",
            u64::from(limits.max_compute_invocations_per_workgroup),
            false,
        ),
    ]
}

/// Prints the adapters, the chosen adapter's memory limits and its buffer types
/// (`as_json`: one JSON object).
///
/// # Errors
/// The device error when `WGPU_BACKEND` is invalid, no adapter exists, or
/// `WGPU_ADAPTER_NAME` matches none.
pub fn run(as_json: bool) -> wgalloc::Result<ExitCode> {
    parse_backends(std::env::var("WGPU_BACKEND").ok().as_deref())?;
    let adapters = list_adapters();
    let ctx = GpuContext::from_env()?;
    let types = ctx.buffer_types()?;
    let is_chosen =
        |info: &wgpu::AdapterInfo| info.name == ctx.info.name && info.backend == ctx.info.backend;
    let limits = memory_limits(&ctx.limits);
    if as_json {
        let limit_map: serde_json::Map<String, Value> = limits
            .iter()
            .map(|(name, value, _)| ((*name).to_string(), json!(value)))
            .collect();
        let out = json!({
            "adapters": adapters.iter().map(|a| adapter_json(a, is_chosen(a))).collect::<Vec<_>>(),
            "chosen": adapter_json(&ctx.info, true),
            "limits": limit_map,
            "timestamp_queries": ctx.has_timestamps(),
            "buffer_types": types,
        });
        println!("{out}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("adapters ({}):", adapters.len());
    for a in &adapters {
        let mark = if is_chosen(a) { '*' } else { ' ' };
        println!(
            "  {mark} {}  type {:?}  driver {:?}  driver info {:?}",
            describe_adapter(a),
            a.device_type,
            a.driver,
            a.driver_info
        );
    }
    println!("chosen: {}", describe_adapter(&ctx.info));
    println!("limits:");
    for (name, value, bytes) in &limits {
        let shown = if *bytes {
            human(*value)
        } else {
            value.to_string()
        };
        println!("  {name:<38} {shown}");
    }
    println!("  {:<38} {}", "timestamp_queries", ctx.has_timestamps());
    println!("buffer types:");
    for t in types.all() {
        println!(
            "  {:<8} alignment {:<5} max size {:<30} usage {}",
            t.desc.name,
            t.desc.alignment(),
            human(t.desc.max_size),
            usage_names(t.usage)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_names_whole_units_only() {
        assert_eq!(human(2 << 30), "2147483648 (2 GiB)");
        assert_eq!(human(128 << 20), "134217728 (128 MiB)");
        assert_eq!(human(65536), "65536 (64 KiB)");
        assert_eq!(human((2 << 30) - 1), "2147483647 (~2.00 GiB)");
        assert_eq!(human(1000), "1000");
        assert_eq!(human(0), "0");
    }

    #[test]
    fn memory_limits_report_the_limits_given() {
        let limits = wgpu::Limits {
            max_buffer_size: 7 << 20,
            min_storage_buffer_offset_alignment: 64,
            ..wgpu::Limits::default()
        };
        let rows = memory_limits(&limits);
        assert!(rows.contains(&("max_buffer_size", 7 << 20, true)));
        assert!(rows.contains(&("min_storage_buffer_offset_alignment", 64, false)));
    }
}

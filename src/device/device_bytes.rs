//! What the driver really reserves for planned memory, from wgpu's allocator report.
//!
//! wgpu exposes the allocator of the backends that sub-allocate device memory
//! themselves (Vulkan and DX12, through gpu-allocator): every live allocation (name,
//! offset, size) and every memory block the driver handed out. Metal and GL allocate
//! each buffer through the driver and report nothing; there the figures are `None`.
//!
//! [`measure_allocation`] takes a report before and after creating buffers: the
//! allocations that appeared are the new buffers' (a buffer's allocation is its
//! memory requirement: at least its size, rounded to the driver's alignment), and the
//! blocks that hold them are what the driver reserved to back them. A block is counted
//! whole even when other buffers (the weights, say) share it: that is the memory the
//! plan keeps reserved. wgalloc requests `MemoryHints::Performance`, under which wgpu's
//! Vulkan and DX12 backends reserve device memory in blocks of 128 to 256 MiB and give
//! a buffer larger than a block a block of its own.

use std::collections::HashMap;

use serde::Serialize;

/// The driver's bytes behind a set of buffers, and the device's totals beside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceBytes {
    /// Sum of the allocations the driver made for the buffers (their memory
    /// requirements): at least the buffers' sizes.
    pub allocated: u64,
    /// Sum of the memory blocks that hold those allocations, each counted once and
    /// whole (shared blocks included).
    pub reserved: u64,
    /// How many memory blocks that is.
    pub blocks: usize,
    /// How much the device's reserved total grew while the buffers were created: 0
    /// when they fitted in blocks the device already held.
    pub newly_reserved: u64,
    /// The whole device's reserved bytes afterwards (every buffer of the process).
    pub device_reserved: u64,
    /// The whole device's allocated bytes afterwards.
    pub device_allocated: u64,
}

/// A key for one allocation of a report; counted, since two blocks may hold
/// allocations with the same name, offset and size.
type AllocationKey = (String, u64, u64);

fn allocation_counts(report: &wgpu::AllocatorReport) -> HashMap<AllocationKey, usize> {
    let mut counts = HashMap::new();
    for a in &report.allocations {
        *counts
            .entry((a.name.clone(), a.offset, a.size))
            .or_insert(0) += 1;
    }
    counts
}

/// The allocator report of `device`, where its backend has one (Vulkan, DX12).
pub fn allocator_report(device: &wgpu::Device) -> Option<wgpu::AllocatorReport> {
    device.generate_allocator_report()
}

/// What changed between `before` and `after`: the allocations that appeared, and the
/// blocks of `after` that hold them.
pub fn device_bytes_between(
    before: &wgpu::AllocatorReport,
    after: &wgpu::AllocatorReport,
) -> DeviceBytes {
    let mut old = allocation_counts(before);
    let mut is_new = vec![false; after.allocations.len()];
    let mut allocated = 0u64;
    for (i, a) in after.allocations.iter().enumerate() {
        let key = (a.name.clone(), a.offset, a.size);
        match old.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                is_new[i] = true;
                allocated = allocated.saturating_add(a.size);
            }
        }
    }
    let mut reserved = 0u64;
    let mut blocks = 0usize;
    for block in &after.blocks {
        let holds_new = block
            .allocations
            .clone()
            .any(|i| is_new.get(i).copied().unwrap_or(false));
        if holds_new {
            reserved = reserved.saturating_add(block.size);
            blocks += 1;
        }
    }
    DeviceBytes {
        allocated,
        reserved,
        blocks,
        newly_reserved: after
            .total_reserved_bytes
            .saturating_sub(before.total_reserved_bytes),
        device_reserved: after.total_reserved_bytes,
        device_allocated: after.total_allocated_bytes,
    }
}

/// Runs `create` (which creates buffers on `device` and returns them) and measures
/// what the driver allocated and reserved for them; `None` beside the result where
/// the backend has no allocator report (Metal, GL). Nothing else should create
/// buffers on the device meanwhile.
///
/// # Errors
/// Whatever `create` returns.
pub fn measure_allocation<T, E>(
    device: &wgpu::Device,
    create: impl FnOnce() -> Result<T, E>,
) -> Result<(T, Option<DeviceBytes>), E> {
    let before = allocator_report(device);
    let value = create()?;
    let bytes = match (before, allocator_report(device)) {
        (Some(before), Some(after)) => Some(device_bytes_between(&before, &after)),
        _ => None,
    };
    Ok((value, bytes))
}

/// A sentence for reports where there is no allocator report.
pub fn no_report_reason(backend: wgpu::Backend) -> String {
    format!("{backend:?} has no allocator report (only Vulkan and DX12 do): device bytes unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(
        allocations: &[(&str, u64, u64)],
        blocks: &[(u64, std::ops::Range<usize>)],
    ) -> wgpu::AllocatorReport {
        wgpu::AllocatorReport {
            allocations: allocations
                .iter()
                .map(|&(name, offset, size)| wgpu::wgt::AllocationReport {
                    name: name.to_string(),
                    offset,
                    size,
                })
                .collect(),
            blocks: blocks
                .iter()
                .map(|(size, allocations)| wgpu::wgt::MemoryBlockReport {
                    size: *size,
                    allocations: allocations.clone(),
                })
                .collect(),
            total_allocated_bytes: allocations.iter().map(|a| a.2).sum(),
            total_reserved_bytes: blocks.iter().map(|b| b.0).sum(),
        }
    }

    #[test]
    fn new_allocations_and_the_blocks_that_hold_them_are_counted() {
        let before = report(&[("w", 0, 100)], &[(1000, 0..1)]);
        let after = report(
            &[("w", 0, 100), ("a", 128, 256), ("big", 0, 5000)],
            &[(1000, 0..2), (5000, 2..3)],
        );
        let bytes = device_bytes_between(&before, &after);
        assert_eq!(bytes.allocated, 256 + 5000);
        assert_eq!(bytes.reserved, 6000);
        assert_eq!(bytes.blocks, 2);
        assert_eq!(bytes.newly_reserved, 5000);
        assert_eq!(bytes.device_reserved, 6000);
    }

    #[test]
    fn nothing_new_counts_nothing() {
        let r = report(&[("w", 0, 100)], &[(1000, 0..1)]);
        let bytes = device_bytes_between(&r, &r);
        assert_eq!((bytes.allocated, bytes.reserved, bytes.blocks), (0, 0, 0));
    }
}

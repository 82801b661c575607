//! [`DeviceShared`]: objects every runner on one device shares (compiled pipelines,
//! bind-group layouts), one of each type per device context and its clones. The device
//! layer stores them without knowing their types; the execution layer decides what they
//! are (its kernel registry, the checksum run's kernels).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

type Slots = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;

/// A per-device store of shared objects, keyed by type. Cloning a
/// [`super::GpuContext`] shares it; a context made by [`super::GpuContext::adopt`]
/// starts a new one.
#[derive(Clone, Default)]
pub struct DeviceShared {
    slots: Arc<Mutex<Slots>>,
}

impl fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.slots.lock().map_or(0, |slots| slots.len());
        f.debug_struct("DeviceShared")
            .field("objects", &count)
            .finish()
    }
}

impl DeviceShared {
    /// The shared `T` of this device, made by `init` the first time it is asked for.
    pub fn get_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = slots
            .get(&TypeId::of::<T>())
            .and_then(|slot| Arc::clone(slot).downcast::<T>().ok())
        {
            return value;
        }
        // The slot of `TypeId::of::<T>()` is empty (it only ever holds a `T`).
        let value = Arc::new(init());
        slots.insert(TypeId::of::<T>(), value.clone());
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_object_per_type_shared_by_clones() {
        let shared = DeviceShared::default();
        let first = shared.get_or_init(|| 7u32);
        let clone = shared.clone();
        let again = clone.get_or_init(|| 8u32);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(*again, 7);
        assert_eq!(*shared.get_or_init(|| String::from("x")), "x");
    }

    #[test]
    fn separate_stores_do_not_share() {
        let a = DeviceShared::default();
        let b = DeviceShared::default();
        assert_eq!(*a.get_or_init(|| 1u8), 1);
        assert_eq!(*b.get_or_init(|| 2u8), 2);
    }
}

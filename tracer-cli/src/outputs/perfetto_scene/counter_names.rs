//! The names of counter tracks, made once each: a counter moves with nearly
//! every event, and formatting its track's name anew each time was a fifth
//! of the command's time.

use crate::wording::device_label;
use cudatrace_analysis::DeviceKey;
use foldhash::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Track names by what they count, each made on first use.
#[derive(Default)]
pub struct CounterNames {
    /// "GPU 0 live bytes": by device and what is counted.
    device: HashMap<(DeviceKey, &'static str), Rc<str>>,
    /// "GPU 0 owner: torch (…)": by device, then owner name.
    owners: HashMap<u8, HashMap<Arc<str>, Rc<str>>>,
}

impl CounterNames {
    /// "`device` `what`", as in "GPU 0 live bytes".
    pub fn device(&mut self, device: DeviceKey, what: &'static str) -> Rc<str> {
        self.device
            .entry((device, what))
            .or_insert_with(|| format!("{} {what}", device_label(device)).into())
            .clone()
    }

    /// "`device` owner: `owner`".
    pub fn owner(&mut self, device: u8, owner: &Arc<str>) -> Rc<str> {
        let names = self.owners.entry(device).or_default();
        if let Some(name) = names.get(&**owner) {
            return name.clone();
        }
        let name: Rc<str> = format!("{} owner: {owner}", device_label(DeviceKey::Gpu(device))).into();
        names.insert(owner.clone(), name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_is_made_once_and_reads_as_before() {
        let mut names = CounterNames::default();
        let live = names.device(DeviceKey::Gpu(1), "live bytes");
        assert_eq!(&*live, "GPU 1 live bytes");
        assert!(Rc::ptr_eq(&live, &names.device(DeviceKey::Gpu(1), "live bytes")));
        assert_eq!(
            &*names.device(DeviceKey::Unknown, "live bytes"),
            "unknown device live bytes"
        );
        let torch: Arc<str> = "torch (torch/lib/libc10_cuda.so)".into();
        let owner = names.owner(0, &torch);
        assert_eq!(&*owner, "GPU 0 owner: torch (torch/lib/libc10_cuda.so)");
        assert!(Rc::ptr_eq(&owner, &names.owner(0, &torch)));
        assert_eq!(
            &*names.owner(2, &torch),
            "GPU 2 owner: torch (torch/lib/libc10_cuda.so)"
        );
    }
}

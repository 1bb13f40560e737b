//! Lanes: the tracks a process's allocations are drawn on, so that no two
//! allocations alive at once share one. Each kind of memory (a device's,
//! or the host's) has lanes of its own; an allocation takes the lowest lane
//! free when it is made and gives it back when it is freed. Taken in time
//! order, the lowest free lane uses as few lanes as any assignment can: as
//! many as the most allocations ever alive at once.

use crate::wording::device_label;
use cudatrace_analysis::{Allocation, DeviceKey};
use foldhash::HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Where an allocation's memory is: what its lanes are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// Memory of a device (or of one the tracer could not tell).
    Device(DeviceKey),
    /// Host memory: pinned, or host-side VMM memory.
    Host,
}

impl Place {
    /// Where `allocation` is.
    pub fn of(allocation: &Allocation) -> Place {
        if allocation.is_device_memory() {
            Place::Device(DeviceKey::of(allocation.device))
        } else {
            Place::Host
        }
    }

    /// The name of its lanes' tracks: every lane of a place has the same
    /// name, so that Perfetto's UI shows them together as one track.
    pub fn track_name(self) -> String {
        match self {
            Place::Device(device) => format!("{} allocations", device_label(device)),
            Place::Host => "host allocations".to_string(),
        }
    }
}

/// One lane: its place, and its number among the place's lanes (from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lane {
    /// The place whose lane it is.
    pub place: Place,
    /// Its number.
    pub number: u32,
}

/// The lanes of one place.
#[derive(Default)]
struct Pool {
    /// Lanes given back, lowest first.
    free: BinaryHeap<Reverse<u32>>,
    /// Lanes ever used.
    used: u32,
}

/// The lanes of one process.
#[derive(Default)]
pub struct Lanes {
    pools: HashMap<Place, Pool>,
}

impl Lanes {
    /// The lowest free lane of `place`, now taken.
    pub fn take(&mut self, place: Place) -> Lane {
        let pool = self.pools.entry(place).or_default();
        let number = match pool.free.pop() {
            Some(Reverse(number)) => number,
            None => {
                pool.used += 1;
                pool.used - 1
            }
        };
        Lane { place, number }
    }

    /// `lane` is free again.
    pub fn give_back(&mut self, lane: Lane) {
        if let Some(pool) = self.pools.get_mut(&lane.place) {
            pool.free.push(Reverse(lane.number));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_lane_is_taken_and_each_place_has_its_own() {
        let gpu = Place::Device(DeviceKey::Gpu(0));
        let mut lanes = Lanes::default();
        let taken: Vec<u32> = (0..4).map(|_| lanes.take(gpu).number).collect();
        assert_eq!(taken, [0, 1, 2, 3]);
        assert_eq!(lanes.take(Place::Host).number, 0);
        lanes.give_back(Lane { place: gpu, number: 2 });
        lanes.give_back(Lane { place: gpu, number: 1 });
        assert_eq!(lanes.take(gpu).number, 1);
        assert_eq!(lanes.take(gpu).number, 2);
        assert_eq!(lanes.take(gpu).number, 4);
        assert_eq!(Place::Host.track_name(), "host allocations");
        assert_eq!(gpu.track_name(), "GPU 0 allocations");
    }
}

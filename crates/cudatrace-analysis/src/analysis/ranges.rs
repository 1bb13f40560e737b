//! Maps of address ranges (start → something with a length) with a range
//! cut out of them: what unmapping or freeing part of a mapping does.

use std::collections::BTreeMap;

/// Removes [start, end) from `map`, whose entries are ranges starting at
/// their key with `length(value)` bytes: an entry inside goes, one that
/// overlaps keeps its parts outside (`resized(value, bytes)` makes a part).
/// Returns the bytes removed.
pub fn cut_range<V: Copy>(
    map: &mut BTreeMap<u64, V>,
    start: u64,
    end: u64,
    length: impl Fn(&V) -> u64,
    resized: impl Fn(V, u64) -> V,
) -> u64 {
    let straddling = map
        .range(..start)
        .next_back()
        .filter(|(&at, value)| at.saturating_add(length(value)) > start)
        .map(|(&at, _)| at);
    let overlapping: Vec<u64> = straddling
        .into_iter()
        .chain(map.range(start..end).map(|(&at, _)| at))
        .collect();
    let mut removed = 0;
    for at in overlapping {
        let value = map.remove(&at).expect("listed above");
        let value_end = at.saturating_add(length(&value));
        if at < start {
            map.insert(at, resized(value, start - at));
        }
        if value_end > end {
            map.insert(end, resized(value, value_end - end));
        }
        removed += value_end.min(end) - at.max(start);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_the_parts_outside_it_and_counts_what_it_took() {
        let mut map: BTreeMap<u64, u64> = [(0, 100), (200, 50), (300, 100)].into_iter().collect();
        let removed = cut_range(&mut map, 50, 350, |&l| l, |_, l| l);
        assert_eq!(removed, 50 + 50 + 50);
        assert_eq!(map.into_iter().collect::<Vec<_>>(), vec![(0, 50), (350, 50)]);
        let mut inside: BTreeMap<u64, u64> = [(0, 100)].into_iter().collect();
        assert_eq!(cut_range(&mut inside, 20, 30, |&l| l, |_, l| l), 10);
        assert_eq!(inside.into_iter().collect::<Vec<_>>(), vec![(0, 20), (30, 70)]);
    }
}

//! A device's label, and the names of the driver's categories of its memory.

use cudatrace_analysis::{Category, DeviceKey};

/// `GPU 0`, or `unknown device`.
pub fn device_label(device: DeviceKey) -> String {
    match device {
        DeviceKey::Gpu(ordinal) => format!("GPU {ordinal}"),
        DeviceKey::Unknown => "unknown device".to_string(),
    }
}

/// A category's name in tables, in `diff` and on Perfetto's tracks.
pub fn category_name(category: Category) -> &'static str {
    match category {
        Category::Pools => "pools beyond live allocations",
        Category::Graphs => "graph memory",
        Category::Context => "context",
        Category::Modules => "modules and kernels",
        Category::StreamsAndEvents => "streams and events",
        Category::GraphExecutables => "executable graphs",
        Category::Unexplained => "unexplained",
    }
}

/// A category's name on the page's owner chart, where the unexplained band
/// says what it is the rest of.
pub fn category_chart_name(category: Category) -> &'static str {
    match category {
        Category::Unexplained => "unexplained (driver-used less all measured)",
        other => category_name(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_categories_have_one_name_each() {
        assert_eq!(device_label(DeviceKey::Gpu(1)), "GPU 1");
        assert_eq!(device_label(DeviceKey::Unknown), "unknown device");
        let names: Vec<&str> = Category::ALL.into_iter().map(category_name).collect();
        assert_eq!(
            names,
            [
                "pools beyond live allocations",
                "graph memory",
                "context",
                "modules and kernels",
                "streams and events",
                "executable graphs",
                "unexplained"
            ]
        );
        assert_eq!(
            category_chart_name(Category::Unexplained),
            "unexplained (driver-used less all measured)"
        );
    }
}

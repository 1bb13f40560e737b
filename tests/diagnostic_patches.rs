//! The diagnostic patches in `tests/gpu/dev/` (timing builds, knock-outs,
//! the step-cost baseline's `unrecorded-blocks.patch`) are kept applying
//! to the source as it moves: each is checked with `git apply --check`.

use std::path::Path;
use std::process::Command;

#[test]
fn every_diagnostic_patch_applies_to_the_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("git is missing: the diagnostic patches are not checked");
        return;
    }
    let mut patches: Vec<String> = std::fs::read_dir(root.join("tests/gpu/dev"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".patch"))
        .collect();
    patches.sort();
    assert!(patches.iter().any(|p| p == "unrecorded-blocks.patch"), "{patches:?}");
    let mut wrong = Vec::new();
    for patch in &patches {
        let check = Command::new("git")
            .current_dir(root)
            .args(["apply", "--check"])
            .arg(Path::new("tests/gpu/dev").join(patch))
            .output()
            .unwrap();
        // A patch that fails is made anew: the same change on the present
        // files, then `git diff > tests/gpu/dev/NAME.patch`.
        if !check.status.success() {
            wrong.push(format!("{patch}: {}", String::from_utf8_lossy(&check.stderr).trim()));
        }
    }
    assert_eq!(wrong, Vec::<String>::new(), "diagnostic patches");
}

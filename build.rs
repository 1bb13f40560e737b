//! Gives `libcudatrace.so` its soname and restricts its dynamic symbol table to
//! the hook entry points, so that nothing else of ours can interpose on the
//! traced program.
fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = std::path::Path::new(&manifest_dir).join("src/exports.map");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudatrace.so");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", script.display());
}

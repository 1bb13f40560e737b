//! Gives `libcudatrace.so` its soname and restricts its dynamic symbol table to
//! the hook entry points, so that nothing else of ours can interpose on the
//! traced program; compiles the one C file, the `exec` functions with
//! variable arguments (which stable Rust cannot define).
fn main() {
    println!("cargo:rerun-if-changed=src/hooks/exec_variadic.c");
    cc::Build::new()
        .file("src/hooks/exec_variadic.c")
        .warnings(true)
        .cargo_metadata(false)
        .compile("exec_variadic");
    // Whole: nothing of ours calls these functions, the program does.
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    println!("cargo:rustc-link-search=native={out_dir}");
    println!("cargo:rustc-link-lib=static:+whole-archive=exec_variadic");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = std::path::Path::new(&manifest_dir).join("src/exports.map");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudatrace.so");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", script.display());
}

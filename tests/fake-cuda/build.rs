//! Compiles the fake CUDA libraries and the test programs into `OUT_DIR`.
use std::path::{Path, PathBuf};
use std::process::Command;

fn compile(compiler: &cc::Tool, args: &[&str]) {
    let mut command = compiler.to_command();
    command
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])
        .args(args);
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler: {e}"));
    assert!(status.success(), "C compiler failed: {command:?}");
}

fn link(target: &Path, name: &str) {
    let _ = std::fs::remove_file(target.with_file_name(name));
    std::os::unix::fs::symlink(target.file_name().unwrap(), target.with_file_name(name)).unwrap();
}

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let lib = out.join("lib");
    let bin = out.join("bin");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    let c = Path::new("c");
    for file in [
        "fake_driver.c",
        "fake_nvml.c",
        "fake_runtime.c",
        "scenarios.c",
        "bench_calls.c",
        "deny_syscall.c",
        "driver_reload.c",
        "stack_names.c",
        "stack_plugin.c",
        "deep_library.c",
        "owner_inner.c",
        "owner_outer.c",
        "cublas_fake.c",
        "explain.c",
        "call_count.c",
        "graph_capture.c",
        "device_switch.c",
        "context_reset.c",
        "held.c",
        "limit.c",
        "cuda_types.h",
        "fake_torch.cpp",
        "fake_torch.map",
        "torch_like.cpp",
    ] {
        println!("cargo:rerun-if-changed=c/{file}");
    }
    let compiler = cc::Build::new().get_compiler();
    let s = |p: &Path| p.to_str().unwrap().to_owned();

    let driver = lib.join("libcuda.so.1");
    compile(
        &compiler,
        &[
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wl,-soname,libcuda.so.1",
            &s(&c.join("fake_driver.c")),
            "-o",
            &s(&driver),
            "-lpthread",
        ],
    );
    link(&driver, "libcuda.so");

    compile(
        &compiler,
        &[
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wl,-soname,libnvidia-ml.so.1",
            &s(&c.join("fake_nvml.c")),
            "-o",
            &s(&lib.join("libnvidia-ml.so.1")),
        ],
    );

    let runtime = lib.join("libcudart.so.13");
    compile(
        &compiler,
        &[
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcudart.so.13",
            &s(&c.join("fake_runtime.c")),
            "-o",
            &s(&runtime),
            "-ldl",
            "-lpthread",
        ],
    );
    link(&runtime, "libcudart.so");

    let runtime_object = out.join("cudart_static.o");
    compile(
        &compiler,
        &["-c", "-fPIC", &s(&c.join("fake_runtime.c")), "-o", &s(&runtime_object)],
    );
    let archive = lib.join("libcudart_static.a");
    let _ = std::fs::remove_file(&archive);
    let status = Command::new("ar")
        .args(["rcs", &s(&archive), &s(&runtime_object)])
        .status()
        .unwrap();
    assert!(status.success(), "ar failed");

    let rpath = format!("-Wl,-rpath,{}", s(&lib));
    let search = format!("-L{}", s(&lib));
    compile(
        &compiler,
        &[
            "-DSTATIC_RUNTIME",
            &s(&c.join("scenarios.c")),
            "-o",
            &s(&bin.join("scenarios_static")),
            &s(&archive),
            &rpath,
            "-ldl",
            "-lpthread",
        ],
    );
    compile(
        &compiler,
        &[
            &s(&c.join("bench_calls.c")),
            "-o",
            &s(&bin.join("bench_calls")),
            &search,
            &rpath,
            "-lcuda",
        ],
    );
    // Programs on the runtime and the driver, linked dynamically.
    for program in [
        "scenarios",
        "call_count",
        "graph_capture",
        "device_switch",
        "context_reset",
        "held",
        "limit",
    ] {
        compile(
            &compiler,
            &[
                &s(&c.join(format!("{program}.c"))),
                "-o",
                &s(&bin.join(program)),
                &search,
                &rpath,
                "-lcudart",
                "-lcuda",
                "-ldl",
                "-lpthread",
            ],
        );
    }
    compile(
        &compiler,
        &[&s(&c.join("deny_syscall.c")), "-o", &s(&bin.join("deny_syscall"))],
    );
    // Loads the driver itself (found through LD_LIBRARY_PATH), so that
    // unloading it unloads it.
    compile(
        &compiler,
        &[
            &s(&c.join("driver_reload.c")),
            "-o",
            &s(&bin.join("driver_reload")),
            "-ldl",
        ],
    );
    // Known frame names, with and without frame pointers.
    for (name, frame_pointers) in [
        ("stack_names_fp", "-fno-omit-frame-pointer"),
        ("stack_names_nofp", "-fomit-frame-pointer"),
    ] {
        compile(
            &compiler,
            &[
                "-g",
                "-O2",
                frame_pointers,
                &s(&c.join("stack_names.c")),
                "-o",
                &s(&bin.join(name)),
                &search,
                &rpath,
                "-lcudart",
                "-ldl",
                "-lpthread",
            ],
        );
    }
    compile(
        &compiler,
        &[
            "-g",
            "-O2",
            "-fomit-frame-pointer",
            "-shared",
            "-fPIC",
            &s(&c.join("stack_plugin.c")),
            "-o",
            &s(&lib.join("libstack_plugin.so")),
            &search,
            &rpath,
            "-lcudart",
            "-lpthread",
        ],
    );
    compile(
        &compiler,
        &[
            "-g",
            "-O2",
            "-fno-omit-frame-pointer",
            "-shared",
            "-fPIC",
            &s(&c.join("deep_library.c")),
            "-o",
            &s(&lib.join("libdeep_library.so")),
            &search,
            &rpath,
            "-lcudart",
        ],
    );
    // Two libraries that allocate, one calling the other, and a program using
    // every category of driver memory.
    for (source, library, needs) in [
        ("owner_inner.c", "libowner_inner.so", None),
        ("owner_outer.c", "libowner_outer.so", Some("-lowner_inner")),
    ] {
        let mut args = vec![
            "-g".to_string(),
            "-O1".into(),
            "-fno-omit-frame-pointer".into(),
            "-shared".into(),
            "-fPIC".into(),
            s(&c.join(source)),
            "-o".into(),
            s(&lib.join(library)),
            search.clone(),
            rpath.clone(),
        ];
        args.extend(needs.map(str::to_string));
        args.push("-lcudart".into());
        compile(&compiler, &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    // A cuBLAS-like library that allocates with the driver itself; PyTorch's
    // scenarios load it with dlopen, as PyTorch loads cuBLAS.
    compile(
        &compiler,
        &[
            "-g",
            "-O1",
            "-fno-omit-frame-pointer",
            "-shared",
            "-fPIC",
            &s(&c.join("cublas_fake.c")),
            "-o",
            &s(&lib.join("libcublas_fake.so")),
            &search,
            &rpath,
            "-lcuda",
        ],
    );
    compile(
        &compiler,
        &[
            "-g",
            "-O1",
            "-fno-omit-frame-pointer",
            &s(&c.join("explain.c")),
            "-o",
            &s(&bin.join("explain")),
            &search,
            &rpath,
            "-lowner_outer",
            "-lowner_inner",
            "-lcudart",
            "-lcuda",
        ],
    );
    build_torch(&out, &lib, &bin);
    println!("cargo:rustc-env=FAKE_CUDA_DIR={}", s(&out));
}

/// The fake `libc10_cuda.so` of PyTorch 2.11 and one of a layout no tracer
/// knows, each in a package folder with its `version.py`, and `torch_like`.
fn build_torch(out: &Path, lib: &Path, bin: &Path) {
    let compiler = cc::Build::new().cpp(true).get_compiler();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let c = Path::new("c");
    let search = format!("-L{}", s(lib));
    let exports = format!("-Wl,--version-script={}", s(&c.join("fake_torch.map")));
    for (folder, version, layout) in [
        ("torch211", "2.11.0+cu130", "-DFAKE_TORCH_2_11_LAYOUT"),
        ("torch_other", "2.99.0", "-DFAKE_TORCH_OTHER_LAYOUT"),
    ] {
        let package = out.join(folder).join("torch");
        std::fs::create_dir_all(package.join("lib")).unwrap();
        compile(
            &compiler,
            &[
                "-std=c++17",
                "-D_GLIBCXX_USE_CXX11_ABI=1",
                layout,
                "-shared",
                "-fPIC",
                "-fvisibility=hidden",
                "-Wl,-soname,libc10_cuda.so",
                &exports,
                &s(&c.join("fake_torch.cpp")),
                "-o",
                &s(&package.join("lib").join("libc10_cuda.so")),
                &search,
                // torch/lib/../../../lib: the fake runtime and driver.
                "-Wl,-rpath,$ORIGIN/../../../lib",
                "-lcudart",
                // Loaded with it, so that the runtime's dlopen finds it.
                "-Wl,--no-as-needed",
                "-lcuda",
                "-Wl,--as-needed",
                "-lpthread",
            ],
        );
        std::fs::write(
            package.join("version.py"),
            format!(
                "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n\
                 __version__ = '{version}'\ndebug = False\ncuda: Optional[str] = '13.0'\n\
                 git_version = 'fake-cuda'\nhip: Optional[str] = None\n"
            ),
        )
        .unwrap();
    }
    compile(
        &compiler,
        &[
            "-std=c++17",
            "-D_GLIBCXX_USE_CXX11_ABI=1",
            &s(&c.join("torch_like.cpp")),
            "-o",
            &s(&bin.join("torch_like")),
            "-ldl",
            "-lpthread",
        ],
    );
}

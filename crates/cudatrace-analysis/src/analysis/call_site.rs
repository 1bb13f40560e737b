//! Call sites as a reader wants them: each headed by the frame that says
//! where in the program the memory was asked for, the rest of the stack
//! with runs of framework frames folded into one line, and stacks that
//! share that frame counted as one place.
//!
//! The headline is, in this order of preference: the innermost Python
//! frame of a file not installed as a package (the program's own); the
//! innermost Python frame of an installed package other than a framework
//! (torchvision); the innermost Python frame; the innermost native frame outside CUDA, cudatrace, the
//! frameworks' C++ libraries, libffi, `_ctypes`, the interpreter and the C
//! and C++ runtimes; the innermost native frame outside CUDA, cudatrace,
//! PyTorch's allocator and those runtimes; the innermost frame.

use super::keys::ByStack;
use super::owner::{installed_package, passes_calls_on};
use super::stack_frames::{is_caching_allocator, Frame};
use super::trace_index::{ProcessIndex, TraceIndex};
use super::trace_summary::largest_call_sites;
use crate::symbolize::PYTHON_MODULE;
use std::collections::HashMap;

/// How much of a stack outputs show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FramesShown {
    /// Runs of framework frames folded into one line each.
    #[default]
    Folded,
    /// Every frame.
    Full,
}

/// NVIDIA's math and communication libraries, by the start of their file
/// names (CUDA itself is [`passes_calls_on`]'s).
const NVIDIA_LIBRARIES: &[&str] = &[
    "libcublas",
    "libcudnn",
    "libnccl",
    "libcufft",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libnvrtc",
    "libnvJitLink",
    "libcupti",
    "libnvidia-",
];

/// The frameworks' native libraries.
const FRAMEWORK_LIBRARIES: &[&str] = &["libc10", "libtorch", "libshm", "xla_extension", "libjax", "libtriton"];

/// The frameworks' Python packages (also where their native modules live).
const FRAMEWORK_PACKAGES: &[&str] = &[
    "torch",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "cupy",
    "cupyx",
    "cupy_backends",
    "triton",
];

/// The C and C++ runtimes and the loader (libffi, `_ctypes` and the
/// interpreter are [`passes_calls_on`]'s).
const RUNTIME_LIBRARIES: &[&str] = &["libc.so", "libc-", "ld-linux", "libpthread", "libstdc++", "libgcc_s"];

/// What a frame is, for choosing headlines and folding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Python code of the program: a file not installed as a package.
    UserPython,
    /// Python code of an installed package that is not a framework
    /// (torchvision, transformers, the program's own installed package).
    LibraryPython,
    /// Python code of a framework, or of the standard library's machinery.
    FrameworkPython,
    /// Native code of the program or of a library that is not listed.
    UserNative,
    /// A framework's native code (its allocator aside).
    FrameworkNative,
    /// CUDA, cudatrace, PyTorch's allocator, the runtimes, the interpreter.
    Plumbing,
}

/// Whether a Python file is a framework's or the standard library's
/// machinery (threading, importlib, runpy) rather than the program's.
fn framework_python_file(file: &str) -> bool {
    if let Some((package, _)) = installed_package(file) {
        return FRAMEWORK_PACKAGES.contains(&package);
    }
    if file.starts_with("<frozen ") {
        return true;
    }
    let name = file.rsplit('/').next().unwrap_or(file);
    let standard_library = file.contains("/lib/python3") && !file.contains("-packages/");
    standard_library && ["threading.py", "runpy.py", "__init__.py"].contains(&name)
        || file.contains("/lib/python3") && file.contains("/importlib/")
}

fn role(frame: &Frame) -> Role {
    let Some(module) = frame.module.as_deref() else {
        return Role::UserNative;
    };
    if module == PYTHON_MODULE {
        return match frame.file.as_deref() {
            Some(file) if framework_python_file(file) => Role::FrameworkPython,
            Some(file) if installed_package(file).is_some() => Role::LibraryPython,
            _ => Role::UserPython,
        };
    }
    let name = module.rsplit('/').next().unwrap_or(module);
    let starts = |list: &[&str]| list.iter().any(|prefix| name.starts_with(prefix));
    if passes_calls_on(module) || is_caching_allocator(module) || starts(NVIDIA_LIBRARIES) || starts(RUNTIME_LIBRARIES)
    {
        return Role::Plumbing;
    }
    if starts(FRAMEWORK_LIBRARIES) || installed_package(module).is_some_and(|(p, _)| FRAMEWORK_PACKAGES.contains(&p)) {
        return Role::FrameworkNative;
    }
    Role::UserNative
}

/// The index of the headline frame of `frames` (innermost first).
pub fn headline(frames: &[Frame]) -> Option<usize> {
    let roles: Vec<Role> = frames.iter().map(role).collect();
    let first = |wanted: &[Role]| roles.iter().position(|r| wanted.contains(r));
    first(&[Role::UserPython])
        .or_else(|| first(&[Role::LibraryPython]))
        .or_else(|| first(&[Role::FrameworkPython]))
        .or_else(|| first(&[Role::UserNative]))
        // A stack of autograd's backward thread has no Python frame: the
        // node computing the gradient says what the memory is for.
        .or_else(|| frames.iter().position(|f| autograd_node(&f.function).is_some()))
        .or_else(|| first(&[Role::FrameworkNative]))
        .or(if frames.is_empty() { None } else { Some(0) })
}

/// The autograd node a frame runs (`ConvolutionBackward0`,
/// `AccumulateGrad`), from its demangled name
/// (`torch::autograd::generated::ConvolutionBackward0::apply(...)`).
pub fn autograd_node(function: &str) -> Option<&str> {
    let rest = function
        .strip_prefix("torch::autograd::generated::")
        .or_else(|| function.strip_prefix("torch::autograd::"))?;
    let (node, method) = rest.split_once("::")?;
    // `ConvolutionBackward0`, `DivBackward2`, `CopyBackwards`, ….
    let is_node = node
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .ends_with("Backward")
        || matches!(node, "AccumulateGrad" | "CopyBackwards" | "CopySlices");
    (is_node && method.starts_with("apply")).then_some(node)
}

/// A frame as a headline: `file:line function` for Python, else
/// `function (file:line) [module]`; with file names only, or (`long`) with
/// their folders.
pub fn headline_text(frame: &Frame, long: bool) -> String {
    let shorten = |path: &str| -> String {
        if long {
            path.to_string()
        } else {
            path.rsplit('/').next().unwrap_or(path).to_string()
        }
    };
    let at_line = |file: &str| match frame.line {
        Some(line) => format!("{}:{line}", shorten(file)),
        None => shorten(file),
    };
    let module = frame.module.as_deref();
    match (module, frame.file.as_deref()) {
        (Some(PYTHON_MODULE), Some(file)) => format!("{} {}", at_line(file), frame.function),
        (Some(PYTHON_MODULE), None) => frame.function.clone(),
        (module, file) => {
            let mut text = match autograd_node(&frame.function) {
                Some(node) => format!("autograd {node} (backward pass)"),
                None => frame.function.clone(),
            };
            if let Some(file) = file {
                text += &format!(" ({})", at_line(file));
            }
            if let Some(module) = module {
                let module = shorten(module);
                if !text.contains(&module) {
                    text += &format!(" [{module}]");
                }
            }
            text
        }
    }
}

/// One line of a stack as outputs show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackLine<'a> {
    /// A frame of its own.
    Frame(&'a Frame),
    /// A run of two or more framework or plumbing frames, folded.
    Folded {
        /// Frames in the run.
        frames: usize,
        /// Where they live, each once, innermost first.
        places: Vec<Place>,
    },
}

/// Where a folded frame lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Python code of an installed package.
    PythonPackage(String),
    /// Python code of a file outside any package (its file name).
    PythonFile(String),
    /// A native library (its file name).
    Library(String),
    /// Code of no known module.
    Unknown,
}

/// The lines a stack is shown as: each frame, except that runs of two or
/// more framework or plumbing frames become one [`StackLine::Folded`] (an
/// autograd node's frame, which names what a gradient is of, is kept);
/// with [`FramesShown::Full`], every frame.
pub fn stack_lines(frames: &[Frame], shown: FramesShown) -> Vec<StackLine<'_>> {
    if shown == FramesShown::Full {
        return frames.iter().map(StackLine::Frame).collect();
    }
    let mut lines = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        let folds = |f: &Frame| {
            !matches!(role(f), Role::UserPython | Role::LibraryPython | Role::UserNative)
                && autograd_node(&f.function).is_none()
        };
        let run = frames[i..].iter().take_while(|f| folds(f)).count();
        if run < 2 {
            lines.push(StackLine::Frame(&frames[i]));
            i += 1;
            continue;
        }
        let mut places: Vec<Place> = Vec::new();
        for frame in &frames[i..i + run] {
            let place = place_of(frame);
            if !places.contains(&place) {
                places.push(place);
            }
        }
        lines.push(StackLine::Folded { frames: run, places });
        i += run;
    }
    lines
}

/// Whether a stack passes through PyTorch's caching allocator (a segment
/// it reserved, not memory of the program's own).
pub fn made_by_caching_allocator(frames: &[Frame]) -> bool {
    frames
        .iter()
        .any(|f| f.module.as_deref().is_some_and(is_caching_allocator))
}

/// Where a folded frame lives: its library's file name, or for Python its
/// package (or file).
fn place_of(frame: &Frame) -> Place {
    match (frame.module.as_deref(), frame.file.as_deref()) {
        (Some(PYTHON_MODULE), Some(file)) => match installed_package(file) {
            Some((package, _)) => Place::PythonPackage(package.to_string()),
            None => Place::PythonFile(file.rsplit('/').next().unwrap_or(file).to_string()),
        },
        (Some(module), _) => Place::Library(module.rsplit('/').next().unwrap_or(module).to_string()),
        (None, _) => Place::Unknown,
    }
}

/// One place in the program that holds memory: every stack whose headline
/// is the same frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// The headline, unique among the sites of one list.
    pub name: String,
    /// What the site's stacks share: [`site_key`].
    pub key: String,
    /// Bytes.
    pub bytes: u64,
    /// Allocations.
    pub allocations: u64,
    /// The stack with the most bytes among them (shown as the example).
    pub stack: u32,
    /// How many different stacks it gathers.
    pub stacks: usize,
    /// For autograd's backward pass: its bytes by autograd node, largest
    /// first (empty for other sites).
    pub parts: Vec<(String, u64)>,
}

/// The call site of every stack of autograd's backward thread: that
/// thread has no frame of the program's, and the node a stack runs is
/// framework detail, kept in `CallSite::parts` and in the stack itself.
/// So the backward pass is one place, as the program's `backward()` call
/// is, and what it left allocated (the gradients) reads as one sum.
pub const BACKWARD_PASS: &str = "autograd backward pass";

/// Whether a stack is one of autograd's backward pass ([`BACKWARD_PASS`]).
pub fn in_backward_pass(frames: &[Frame]) -> bool {
    headline(frames).is_some_and(|at| autograd_node(&frames[at].function).is_some())
}

/// A stack's call site: `(key, name, autograd node)`. The key is the
/// headline frame in full (file or module path, line and function), the
/// name its short form; the backward pass is [`BACKWARD_PASS`], with the
/// node; "(no call stack recorded)" without frames.
fn site_of(frames: &[Frame]) -> (String, String, Option<String>) {
    match headline(frames) {
        Some(at) => match autograd_node(&frames[at].function) {
            Some(node) => (
                BACKWARD_PASS.to_string(),
                BACKWARD_PASS.to_string(),
                Some(node.to_string()),
            ),
            None => (
                headline_text(&frames[at], true),
                headline_text(&frames[at], false),
                None,
            ),
        },
        None => (NO_STACK.to_string(), NO_STACK.to_string(), None),
    }
}

/// The short name of a stack's call site (before names shared by two
/// sites of one list are told apart): its headline frame, or the backward
/// pass as a whole.
pub fn site_name(frames: &[Frame]) -> String {
    site_of(frames).1
}

/// What a stack's call site is known by: its headline frame in full (file
/// or module path, line and function), or "(no call stack recorded)".
pub fn site_key(index: &TraceIndex, info: &ProcessIndex, stack: u32) -> String {
    site_key_of(&index.frames(info, stack))
}

/// [`site_key`] of a stack already resolved to its `frames` (innermost
/// first): what `diff` matches call sites of two runs by.
pub fn site_key_of(frames: &[Frame]) -> String {
    site_of(frames).0
}

/// What every output says in place of a stack that has no frames.
pub const NO_STACK: &str = "(no call stack recorded)";

/// The call sites of `by_stack`, largest first.
pub fn call_sites(index: &TraceIndex, info: &ProcessIndex, by_stack: &ByStack) -> Vec<CallSite> {
    let mut sites: Vec<CallSite> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    // Largest stacks first, so each site's example is its largest stack.
    for (stack, bytes, allocations) in largest_call_sites(by_stack) {
        let (key, name, node) = site_of(&index.frames(info, stack));
        let at = match by_key.get(&key) {
            Some(&at) => {
                sites[at].bytes += bytes;
                sites[at].allocations += allocations;
                sites[at].stacks += 1;
                at
            }
            None => {
                by_key.insert(key.clone(), sites.len());
                sites.push(CallSite {
                    name,
                    key,
                    bytes,
                    allocations,
                    stack,
                    stacks: 1,
                    parts: Vec::new(),
                });
                sites.len() - 1
            }
        };
        if let Some(node) = node {
            let parts = &mut sites[at].parts;
            match parts.iter_mut().find(|(name, _)| *name == node) {
                Some(part) => part.1 += bytes,
                None => parts.push((node, bytes)),
            }
        }
    }
    for site in &mut sites {
        site.parts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    make_names_unique(&mut sites);
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    sites
}

/// Where two sites' short names coincide, both take their keys (the long
/// form); where those coincide too, a number.
fn make_names_unique(sites: &mut [CallSite]) {
    let mut uses: HashMap<String, usize> = HashMap::new();
    for site in sites.iter() {
        *uses.entry(site.name.clone()).or_default() += 1;
    }
    for site in sites.iter_mut() {
        if uses[&site.name] > 1 {
            site.name = site.key.clone();
        }
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for site in sites.iter_mut() {
        let n = seen.entry(site.name.clone()).or_default();
        *n += 1;
        if *n > 1 {
            site.name = format!("{} #{n}", site.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_frames::{native, python, pytorch_stack};

    #[test]
    fn the_headline_is_the_innermost_python_line_of_the_program() {
        let frames = pytorch_stack();
        let at = headline(&frames).unwrap();
        assert_eq!(headline_text(&frames[at], false), "model.py:31 forward");
        assert_eq!(headline_text(&frames[at], true), "/home/me/model.py:31 forward");
    }

    #[test]
    fn a_backward_thread_s_stack_is_headed_by_its_autograd_node() {
        let frames = vec![
            native("cudaMalloc", "/usr/lib/libcudart.so.13"),
            native(
                "c10::cuda::CUDACachingAllocator::malloc",
                "/sp/torch/lib/libc10_cuda.so",
            ),
            native(
                "at::detail::empty_generic(c10::ArrayRef<long>)",
                "/sp/torch/lib/libtorch_cpu.so",
            ),
            native(
                "at::native::cudnn_convolution_backward",
                "/sp/torch/lib/libtorch_cuda.so",
            ),
            native(
                "torch::autograd::generated::ConvolutionBackward0::apply(std::vector<at::Tensor>&&)",
                "/sp/torch/lib/libtorch_cpu.so",
            ),
            native(
                "torch::autograd::Engine::evaluate_function",
                "/sp/torch/lib/libtorch_cpu.so",
            ),
            native("torch::autograd::Engine::thread_main", "/sp/torch/lib/libtorch_cpu.so"),
            native("start_thread", "/usr/lib/libc.so.6"),
        ];
        let at = headline(&frames).unwrap();
        assert_eq!(at, 4);
        assert_eq!(
            headline_text(&frames[at], false),
            "autograd ConvolutionBackward0 (backward pass) [libtorch_cpu.so]"
        );
        assert_eq!(
            autograd_node("torch::autograd::AccumulateGrad::apply(x)"),
            Some("AccumulateGrad")
        );
        assert_eq!(autograd_node("torch::autograd::Engine::thread_main"), None);
        assert_eq!(
            autograd_node("torch::autograd::generated::DivBackward2::apply(x)"),
            Some("DivBackward2")
        );
        assert_eq!(
            autograd_node("torch::autograd::CopyBackwards::apply(x)"),
            Some("CopyBackwards")
        );
        assert_eq!(
            autograd_node("torch::autograd::CopySlices::apply(x)"),
            Some("CopySlices")
        );
        // Every node's stacks are one call site, the backward pass, that
        // keeps the node.
        assert_eq!(
            site_of(&frames),
            (
                BACKWARD_PASS.to_string(),
                BACKWARD_PASS.to_string(),
                Some("ConvolutionBackward0".to_string())
            )
        );
        // A Python line, where there is one, still comes first.
        let mut with_python = frames.clone();
        with_python.push(python("step", "/home/me/train.py", 9));
        let at = headline(&with_python).unwrap();
        assert_eq!(headline_text(&with_python[at], false), "train.py:9 step");
    }

    #[test]
    fn the_program_s_own_file_comes_before_an_installed_library_s() {
        let mut frames = pytorch_stack();
        frames.insert(
            6 + 23,
            python(
                "ResNet._forward_impl",
                "/venv/lib/python3.12/site-packages/torchvision/models/resnet.py",
                280,
            ),
        );
        let at = headline(&frames).unwrap();
        assert_eq!(headline_text(&frames[at], false), "model.py:31 forward");
        // Without the program's own frames, the library's line.
        frames.retain(|f| !f.file.as_deref().is_some_and(|file| file.starts_with("/home/me/")));
        let at = headline(&frames).unwrap();
        assert_eq!(headline_text(&frames[at], false), "resnet.py:280 ResNet._forward_impl");
    }

    #[test]
    fn without_python_the_headline_is_the_innermost_native_frame_outside_cuda_and_frameworks() {
        let frames = vec![
            native("cudaMalloc", "/usr/lib/libcudart.so.13"),
            native("ffi_call", "/usr/lib/libffi.so.8"),
            native("deep_level_12", "/opt/ext/libdeep.so"),
            native("main", "/opt/ext/program"),
        ];
        assert_eq!(headline(&frames), Some(2));
        assert_eq!(headline_text(&frames[2], false), "deep_level_12 [libdeep.so]");
        assert_eq!(headline_text(&frames[2], true), "deep_level_12 [/opt/ext/libdeep.so]");
        // Only framework code: its innermost frame outside the plumbing.
        let frames = vec![
            native("cudaMalloc", "/usr/lib/libcudart.so.13"),
            native("c10::malloc", "/sp/torch/lib/libc10_cuda.so"),
            native("at::native::conv_backward", "/sp/torch/lib/libtorch_cuda.so"),
            native("start_thread", "/usr/lib/libc.so.6"),
        ];
        assert_eq!(headline(&frames), Some(2));
        // A framework's own Python code when no other Python frame is there.
        let frames = vec![
            native("cudaMalloc", "/usr/lib/libcudart.so.13"),
            python("f", "/venv/lib/python3.12/site-packages/torch/cuda/__init__.py", 3),
        ];
        assert_eq!(headline(&frames), Some(1));
        assert_eq!(headline(&[]), None);
    }

    #[test]
    fn runs_of_framework_frames_fold_into_one_line_and_full_shows_every_frame() {
        let frames = pytorch_stack();
        let folded = stack_lines(&frames, FramesShown::Folded);
        let library = |name: &str| Place::Library(name.to_string());
        assert_eq!(
            folded[0],
            StackLine::Folded {
                frames: 33,
                places: vec![
                    library("libcudart.so.13"),
                    library("libc10_cuda.so"),
                    library("libtorch_cuda.so"),
                    library("libtorch_python.so"),
                    library("python3.12"),
                    Place::PythonPackage("torch".to_string()),
                ]
            }
        );
        assert_eq!(
            folded[1..],
            frames[33..].iter().map(StackLine::Frame).collect::<Vec<_>>()
        );
        assert_eq!(stack_lines(&frames, FramesShown::Full).len(), frames.len());
        // A single plumbing frame between two of the program's is kept
        // (and worded so in the command line's `wording::stacks` tests).
        let frames = vec![
            native("a", "/opt/libuser.so"),
            native("ffi_call", "/usr/lib/libffi.so.8"),
            native("b", "/opt/libuser.so"),
        ];
        assert_eq!(
            stack_lines(&frames, FramesShown::Folded),
            frames.iter().map(StackLine::Frame).collect::<Vec<_>>()
        );
    }

    #[test]
    fn coinciding_names_take_their_long_form_then_a_number() {
        let site = |name: &str, key: &str| CallSite {
            name: name.into(),
            key: key.into(),
            bytes: 1,
            allocations: 1,
            stack: 1,
            stacks: 1,
            parts: Vec::new(),
        };
        let mut sites = vec![
            site("model.py:3 f", "/a/model.py:3 f"),
            site("model.py:3 f", "/b/model.py:3 f"),
            site("other.py:1 g", "/c/other.py:1 g"),
        ];
        make_names_unique(&mut sites);
        let names: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["/a/model.py:3 f", "/b/model.py:3 f", "other.py:1 g"]);
        let mut same = vec![site("x", "x"), site("x", "x")];
        make_names_unique(&mut same);
        let names: Vec<&str> = same.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["x", "x #2"]);
    }
}

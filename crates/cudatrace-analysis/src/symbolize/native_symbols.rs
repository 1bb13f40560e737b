//! Native frames from the ELF files the module map names, with blazesym
//! (DWARF where present, the symbol table otherwise, `module+0xoffset`
//! without either), cached per module and address.

use super::text_frames::TextFrame;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use cudatrace_events::stacks::ModuleInfo;
use std::collections::HashMap;

/// Native symbolization, cached per (module path, address in the file).
#[derive(Default)]
pub(super) struct NativeSymbols {
    symbolizer: Option<Symbolizer>,
    /// For the frames blazesym refuses (a name that is not UTF-8).
    byte_names: super::byte_names::ByteNames,
    cache: HashMap<(String, u64), Vec<TextFrame>>,
}

impl NativeSymbols {
    /// The frames behind return address `address` (innermost first).
    pub(super) fn frames(&mut self, modules: &[ModuleInfo], address: u64) -> Vec<TextFrame> {
        // A return address points past the call instruction.
        let lookup = address.saturating_sub(1);
        let Some(module) = modules.iter().find(|m| (m.start..m.end).contains(&lookup)) else {
            return vec![TextFrame {
                function: format!("0x{address:x}"),
                file: String::new(),
                line: 0,
                module: String::new(),
            }];
        };
        let file_address = lookup - module.bias;
        let key = (module.path.clone(), file_address);
        if let Some(frames) = self.cache.get(&key) {
            return frames.clone();
        }
        let frames = self.symbolize(module, file_address);
        self.cache.insert(key, frames.clone());
        frames
    }

    fn symbolize(&mut self, module: &ModuleInfo, file_address: u64) -> Vec<TextFrame> {
        let base_name = module.path.rsplit('/').next().unwrap_or(&module.path).to_owned();
        let fallback = vec![TextFrame {
            function: format!("{base_name}+0x{file_address:x}"),
            file: String::new(),
            line: 0,
            module: module.path.clone(),
        }];
        if module.path.is_empty()
            || module.path.starts_with("linux-vdso")
            || !std::path::Path::new(&module.path).exists()
        {
            return fallback;
        }
        let symbolizer = self.symbolizer.get_or_insert_with(|| {
            Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .build()
        });
        let source = Source::Elf(Elf::new(&module.path));
        let sym = match symbolizer.symbolize_single(&source, Input::VirtOffset(file_address)) {
            Ok(Symbolized::Sym(sym)) => sym,
            Ok(_) => return fallback,
            // blazesym refuses a frame whose name is not UTF-8, file and
            // line included: read them with the name as bytes.
            Err(_) => {
                return match self.byte_names.frame(&module.path, file_address) {
                    Some(frame) => vec![TextFrame {
                        function: frame.function,
                        file: frame.file,
                        line: frame.line,
                        module: module.path.clone(),
                    }],
                    None => fallback,
                }
            }
        };
        let location = |info: &Option<blazesym::symbolize::CodeInfo>| -> (String, u32) {
            info.as_ref().map_or((String::new(), 0), |info| {
                (info.to_path().to_string_lossy().into_owned(), info.line.unwrap_or(0))
            })
        };
        // blazesym lists inlined calls outermost first. The symbol's own
        // location is where it calls the first inlined function (or the
        // instruction, without inlining); each inlined function's location
        // lies inside it.
        let mut names: Vec<String> = vec![sym.name.to_string()];
        names.extend(sym.inlined.iter().map(|f| f.name.to_string()));
        let mut locations: Vec<(String, u32)> = vec![location(&sym.code_info.as_deref().cloned())];
        locations.extend(sym.inlined.iter().map(|f| location(&f.code_info)));
        names
            .into_iter()
            .zip(locations)
            .rev()
            .map(|(function, (file, line))| TextFrame {
                function,
                file,
                line,
                module: module.path.clone(),
            })
            .collect()
    }
}

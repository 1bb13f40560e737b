//! Which hook stands for which CUDA symbol, for the doors that hand hooks
//! out (`dlsym`, `cuGetProcAddress`).

use crate::system::symbols::{self, with_cuda_symbols, CudaLibrary, Sym};
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! define_hook_addresses {
    (
        $( hooked in $module:ident : $( $hook:ident ),* ; )*
        support: $( $support:ident ),* ;
    ) => {
        /// Address of our hook for `sym`, or `None` for a symbol we only call.
        pub(crate) fn hook_address(sym: Sym) -> Option<usize> {
            match sym {
                $( $( Sym::$hook => Some(crate::hooks::$module::$hook as *const () as usize), )* )*
                $( Sym::$support => None, )*
            }
        }
    };
}

with_cuda_symbols!(define_hook_addresses);

/// Our hook for `sym`, unless it is turned off (`--no-launch-hooks`, or
/// no memory limit for the memory queries): then the program is handed the
/// real function and pays nothing at all.
pub(crate) fn active_hook(sym: Sym) -> Option<usize> {
    if sym.is_launch() && !crate::hooks::launch::enabled() {
        return None;
    }
    if sym.is_limit_query() && !crate::record::memory_limit::enabled() {
        return None;
    }
    hook_address(sym)
}

/// The hooked symbol called `name` whose hook is active, if any.
pub(crate) fn actively_hooked_by_name(name: &[u8]) -> Option<Sym> {
    Sym::hooked_by_name(name).filter(|&sym| active_hook(sym).is_some())
}

/// 1 + the driver generation whose every real address was looked up
/// (0 = never): a driver loaded again elsewhere is looked up again.
static DRIVER_TABLE_COMPLETE: AtomicU64 = AtomicU64::new(0);

/// Our hook for the driver export at `address`, if `address` is the real
/// version of a driver symbol we hook. The driver's `cuGetProcAddress` returns
/// export addresses exactly, so an address identifies the versioned export,
/// and with it the ABI the caller expects.
pub(crate) fn hook_for_real_driver_address(address: usize) -> Option<usize> {
    let generation = symbols::driver_generation() + 1;
    if DRIVER_TABLE_COMPLETE.load(Ordering::Acquire) != generation {
        symbols::resolve_all_driver_symbols();
        DRIVER_TABLE_COMPLETE.store(generation, Ordering::Release);
    }
    Sym::ALL
        .iter()
        .find(|&&sym| sym.library() == CudaLibrary::Driver && symbols::real_if_known(sym) == Some(address))
        .and_then(|&sym| active_hook(sym))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooked_symbols_have_hooks_and_support_symbols_have_none() {
        for &sym in Sym::ALL {
            assert_eq!(hook_address(sym).is_some(), sym.is_hooked(), "{:?}", sym);
        }
        assert_eq!(actively_hooked_by_name(b"cuMemAlloc_v2"), Some(Sym::cuMemAlloc_v2));
        assert_eq!(actively_hooked_by_name(b"cuMemGetInfo_v2"), None);
    }
}

//! macOS: APFS clones (a cache elsewhere is a misconfiguration), code verified per inode on
//! first run, and a "developer tool" exemption. Type-checked and linted in CI for
//! aarch64-apple-darwin; not run there (no macOS host).
//!
//! The exemption: macOS skips the scans for processes whose responsible app is allowed under
//! System Settings > Privacy & Security > Developer Tools (`spctl developer-mode
//! enable-terminal` adds Terminal there; spctl(8) in the MacOSX15.4 SDK). A process asks for
//! its own standing with ExecutionPolicy.framework's `EPDeveloperTool.authorizationStatus`
//! (macOS 10.15+, `EPDeveloperTool.h`: not determined, restricted, denied, authorized), as
//! cargo's `-Zdetect-antivirus` does (rust-lang/cargo PR 15908). The framework and the
//! Objective-C runtime are loaded with dlopen, so the binary links against neither.

use std::ffi::{c_char, c_void, CStr};

pub const NAME: &str = "macOS";
pub const APPLE: bool = true;
pub const CLONES_EXPECTED: bool = true;
/// "A few hundred" execs per kind of link: 5 kills in 3,840 fresh links (jdx/mr-boxington
/// PR 134) is about one in 770, so 300 runs see one with a chance of about a third.
pub const EXEC_RUNS: u32 = 300;

const OBJC: &CStr = c"/usr/lib/libobjc.A.dylib";
const EP: &CStr = c"/System/Library/Frameworks/ExecutionPolicy.framework/ExecutionPolicy";

/// Bazel on macOS comes stamped (bazelisk, Homebrew, release binaries): no package to ask.
pub fn packaged_version(_bazel: &std::path::Path) -> Option<(String, String)> {
    None
}

/// `EPDeveloperTool.authorizationStatus` of this process, in words; None when the framework
/// or the class is not there.
pub fn developer_tool_status() -> Option<String> {
    // SAFETY: dlopen/dlsym of system libraries; the symbols are the Objective-C runtime's
    // documented C entry points, called with their C signatures (objc_msgSend cast per use:
    // arguments are objects and selectors, the results an object or an NSInteger, which
    // arm64 and x86_64 return in a register).
    unsafe {
        let objc = libc::dlopen(OBJC.as_ptr(), libc::RTLD_NOW);
        let ep = libc::dlopen(EP.as_ptr(), libc::RTLD_NOW);
        if objc.is_null() || ep.is_null() {
            return None;
        }
        let sym = |name: &CStr| libc::dlsym(objc, name.as_ptr());
        let (get_class, register, send) = (
            sym(c"objc_getClass"),
            sym(c"sel_registerName"),
            sym(c"objc_msgSend"),
        );
        if get_class.is_null() || register.is_null() || send.is_null() {
            return None;
        }
        type GetClass = unsafe extern "C" fn(*const c_char) -> *mut c_void;
        type Register = unsafe extern "C" fn(*const c_char) -> *mut c_void;
        type SendObj = unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void;
        type SendInt = unsafe extern "C" fn(*mut c_void, *mut c_void) -> isize;
        let get_class: GetClass = std::mem::transmute(get_class);
        let register: Register = std::mem::transmute(register);
        let send_obj: SendObj = std::mem::transmute(send);
        let send_int: SendInt = std::mem::transmute(send);
        let class = get_class(c"EPDeveloperTool".as_ptr());
        if class.is_null() {
            return None;
        }
        let tool = send_obj(
            send_obj(class, register(c"alloc".as_ptr())),
            register(c"init".as_ptr()),
        );
        if tool.is_null() {
            return None;
        }
        let status = send_int(tool, register(c"authorizationStatus".as_ptr()));
        send_obj(tool, register(c"release".as_ptr()));
        Some(
            match status {
                0 => "not determined",
                1 => "restricted",
                2 => "denied",
                3 => "authorized",
                _ => "unknown",
            }
            .to_string(),
        )
    }
}

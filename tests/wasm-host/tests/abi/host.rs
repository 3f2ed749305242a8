//! The host itself: it refuses, loudly and at load time, modules it cannot run faithfully.

use ferry_wasm_host::Host;

/// A module of one function type `() -> ()` importing `env::NAME` (hand-assembled wasm).
fn module_importing(name: &str) -> Vec<u8> {
    let mut import = vec![1, 3];
    import.extend_from_slice(b"env");
    import.push(name.len() as u8);
    import.extend_from_slice(name.as_bytes());
    import.extend_from_slice(&[0, 0]); // a function of type 0
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    m.extend_from_slice(&[1, 4, 1, 0x60, 0, 0]); // type section: () -> ()
    m.push(2);
    m.push(import.len() as u8);
    m.extend_from_slice(&import);
    m
}

fn load(name: &str, bytes: &[u8]) -> Result<Host, String> {
    let dir = std::env::temp_dir().join(format!("ferry-wasm-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    Host::load(&path)
}

#[test]
fn unknown_imports_fail_at_load_naming_them() {
    let Err(e) = load("unknown.wasm", &module_importing("proxy_frobnicate")) else {
        panic!("a module importing env::proxy_frobnicate was loaded");
    };
    assert!(e.contains("env::proxy_frobnicate"), "{e}");
}

#[test]
fn modules_without_the_abi_version_export_are_refused() {
    let Err(e) = load("empty.wasm", b"\0asm\x01\0\0\0") else {
        panic!("loaded a module that does not speak proxy-wasm ABI 0.2.1");
    };
    assert!(e.contains("proxy_abi_version_0_2_1"), "{e}");
}

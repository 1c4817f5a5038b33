//! Links the shared object the way C consumers expect: SONAME `libib_cm.so.0`
//! and only the API exported (versioned through `libib_cm.map`).
fn main() {
    let map = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("libib_cm.map");
    println!("cargo:rerun-if-changed={}", map.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libib_cm.so.0");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}

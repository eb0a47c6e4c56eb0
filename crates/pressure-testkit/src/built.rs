//! [`dev_dependency_library`]: a library cargo built for the running test.

use std::path::PathBuf;

/// The library file `name` (e.g. `libpressure_node.so`) of a `cdylib`
/// dev-dependency of the running test's package: cargo builds it before
/// the test, into the `deps` directory that holds the test executable, so
/// it is this build's, never a stale one.
///
/// # Panics
/// When the test executable's path is unknown, or `name` is not beside it
/// (the crate is not a dev-dependency, or is not a `cdylib`).
pub fn dev_dependency_library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // <target>/<profile>/deps/<test>-<hash>, beside the library.
    let built = exe.parent().expect("the test executable's directory").join(name);
    assert!(
        built.is_file(),
        "{} is missing: cargo builds it for a cdylib dev-dependency of this package",
        built.display()
    );
    built
}

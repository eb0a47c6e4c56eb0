//! Sets the linker flags a Node addon needs (undefined napi symbols resolved
//! by the host `node` process at load time).

fn main() {
    napi_build::setup();
}

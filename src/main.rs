//! The `wgalloc` command-line tool: a thin shell over the library.

fn main() {
    env_logger::init();
}

//! The `rdml` command: [`cli`] parses and calls the library; this file sets the process up
//! and turns the outcome into an exit status.

mod cli;

use cli::{Outcome, UNHEALTHY_EXIT, run};

fn main() {
    rdml::tune_allocator();
    // burn materialises loaded optimizer state on `Device::default()`, which a `vulkan` build
    // makes the GPU: keep it on the CPU (it moves to the parameters' device at the next step).
    if std::env::var_os("BURN_DEVICE").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("BURN_DEVICE", "flex") };
    }
    rdml::field::set_build_words(cli::build_words);
    // The library's warnings and notes: a line each on standard error, in the command line's words.
    rdml::notes::set_sink(Some(Box::new(|level, text| {
        eprintln!("{}: {}", level.word(), words(text))
    })));
    let cli = cli::parse();
    // A failure on the device (out of memory above all) surfaces as a panic at the next read
    // from it; report it as an error, with advice where there is some.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = panic_message(info.payload());
        if rdml::device::out_of_memory_advice(&msg).is_none() {
            default_hook(info);
        }
    }));
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli))) {
        Ok(Ok(Outcome::Done)) => 0,
        Ok(Ok(Outcome::Unhealthy)) => UNHEALTHY_EXIT,
        Ok(Err(e)) => {
            let msg = format!("{e:#}");
            let said = rdml::device::out_of_memory_report(&msg).unwrap_or(msg);
            eprintln!("error: {}", words(&said));
            1
        }
        Err(payload) => match rdml::device::out_of_memory_report(&panic_message(payload.as_ref())) {
            Some(report) => {
                eprintln!("error: {}", words(&report));
                1
            }
            None => 101,
        },
    };
    std::process::exit(code);
}

/// A library message as the command line says it (`--overwrite`, not the library's token).
fn words(msg: &str) -> String {
    rdml::field::render(msg, rdml::field::Words::CommandLine)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

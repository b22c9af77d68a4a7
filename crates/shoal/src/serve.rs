//! `shoal server` and `shoal local`: run Shoal in the foreground until
//! Ctrl-C (SIGINT) or SIGTERM, then stop gracefully.
//!
//! `shoal server` starts one server from its flags and config file.
//! `shoal local` starts a working Shoal on this machine with defaults meant
//! for trying it (today one server; with the cluster, a coordinator and
//! several servers) and prints how to connect.

use shoal_server::{init_logging, Server, ServerArgs, ServerConfig};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ServerCommand {
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(clap::Args, Debug)]
pub struct LocalCommand {
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Starts a server from `args` over `base`, logs, and waits for a signal.
fn start(args: ServerArgs, base: ServerConfig) -> Result<Server, String> {
    let config = args.into_config(base).map_err(|e| e.to_string())?;
    init_logging(&config.log_level)?;
    if let Some(dir) = &config.data_dir {
        tracing::warn!("data directory {} is not used yet: this server keeps everything in memory", dir.display());
    }
    Server::start_with_signals(config).map_err(|e| e.to_string())
}

fn fail(e: String) -> ExitCode {
    eprintln!("shoal: {e}");
    ExitCode::FAILURE
}

pub fn server(cmd: &ServerCommand) -> ExitCode {
    let server = match start(cmd.server.clone(), ServerConfig::default()) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let a = server.addresses();
    let native = a.native.map_or("off".to_string(), |n| n.to_string());
    tracing::info!("shoal server ready: native protocol on {native}, Redis protocol on {}", a.resp);
    server.wait();
    ExitCode::SUCCESS
}

pub fn local(cmd: &LocalCommand) -> ExitCode {
    let server = match start(cmd.server.clone(), ServerConfig::default()) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let a = server.addresses();
    let memory = server.context().config.memory;
    println!("Shoal is running on this machine: 1 server, {memory} of memory for objects.");
    if let Some(native) = a.native {
        println!("  native protocol: {native}");
    }
    println!("  Redis protocol:  {}    try: redis-cli -p {} set hello world", a.resp, a.resp.port());
    println!("Stop with Ctrl-C.");
    server.wait();
    println!("Shoal stopped.");
    ExitCode::SUCCESS
}

//! Runs a RESP server until Ctrl-C, for trying the front end by hand before
//! `shoal server` exists: `cargo run -p shoal-server --example resp_server -- --resp-port 6380`.

use clap::Parser;
use shoal_server::{init_logging, Server, ServerArgs, ServerConfig};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    server: ServerArgs,
}

fn main() {
    let cli = Cli::parse();
    let config = match cli.server.into_config(ServerConfig::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    init_logging(&config.log_level).expect("log level");
    let server = Server::start_with_signals(config).expect("server starts");
    println!("RESP on {}", server.resp_addr());
    server.wait();
}

//! The `esim-reseller` binary: command-line parsing only.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use esim_reseller::{
    app::{Application, shutdown_signal},
    backup,
    config::{self, Settings, Sources},
    operator::cli::{self, AdminArgs},
    store, telemetry,
};

/// mimalloc: the order path allocates and frees many small buffers across
/// threads (request bodies, rows, channel messages), where glibc's arenas
/// spent about a sixth of the server's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Prepaid eSIM reselling API for partners.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service (applies migrations first).
    Serve {
        /// Overrides applied on top of the configuration: `loadtest` lifts
        /// every rate-limit band and the suppliers' limits and latency
        /// (refused when the simulators are off).
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// Run only the simulators of the suppliers and the payment provider
    /// (no database, no partner API), on `simulators.addr`.
    Simulate {
        /// The public URL of the service their webhooks go to.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        callbacks_to: String,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Operator commands against a running service.
    Admin(AdminArgs),
    /// Drive a running service with concurrent orders and check the money.
    Loadtest(esim_reseller::loadtest::LoadtestArgs),
    /// Print the OpenAPI document of the partner API.
    Openapi,
    /// Copy the running service's SQLite database, consistently and without
    /// stopping it, then check the copy.
    Backup {
        /// Where to write the copy (must not exist).
        #[arg(long)]
        to: std::path::PathBuf,
    },
    /// Check a copy of the database: SQLite's integrity check and the money
    /// invariants (exit status 1 naming the first problem). Without a file,
    /// the configured database (SQLite or PostgreSQL) where it stands, while
    /// it serves: the money invariants and references in one snapshot.
    Verify {
        /// The copy to check; the configured database when left out.
        file: Option<std::path::PathBuf>,
    },
    /// Inspect the configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Load the configuration as `serve` would and print what it would
    /// refuse (exit status 1 when anything).
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    esim_reseller::install_tls_provider();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Serve { profile } => serve(profile.as_deref()).await,
        Command::Simulate { callbacks_to } => {
            let settings = Settings::load(&Sources::from_process())?;
            let _log = telemetry::init(&settings.log);
            esim_reseller::app::simulate(settings, &callbacks_to).await?;
            Ok(0)
        }
        Command::Migrate => {
            let settings = Settings::load(&Sources::from_process())?;
            let _log = telemetry::init(&settings.log);
            let db = store::connect(&settings.database).await?;
            store::migrate(&db).await?;
            tracing::info!("migrations applied");
            Ok(0)
        }
        Command::Admin(args) => cli::run(args).await,
        Command::Loadtest(args) => esim_reseller::loadtest::run(args).await,
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            let settings = Settings::load(&Sources::from_process())?;
            let problems = settings.production_problems();
            let mode = match settings.is_development() {
                true => "development (simulators on, listeners on loopback)".to_owned(),
                false => format!("production: {}", settings.why_not_development()),
            };
            println!("setup: {mode}");
            println!(
                "/metrics asks for the operator token: {}",
                settings.metrics_require_token()
            );
            if problems.is_empty() {
                println!("ok: serve would start");
                return Ok(0);
            }
            println!("serve would refuse to start:");
            for problem in &problems {
                println!("  - {problem}");
            }
            Ok(1)
        }
        Command::Openapi => {
            print!("{}", esim_reseller::http::openapi::to_json());
            Ok(0)
        }
        Command::Backup { to } => backup(&to).await,
        Command::Verify { file: None } => verify_in_place().await,
        Command::Verify { file: Some(file) } => match backup::verify(&file).await {
            Ok(held) => {
                println!(
                    "ok: {} passed SQLite's integrity check and every money invariant ({} orders, {} partners)",
                    file.display(),
                    held.orders,
                    held.partners
                );
                Ok(0)
            }
            Err(unfit) => {
                println!("FAILED: {unfit}");
                Ok(1)
            }
        },
    }
}

/// `serve [--profile NAME]`: the profile's overrides go on top of every
/// configuration layer, and are announced before anything binds.
async fn serve(profile: Option<&str>) -> anyhow::Result<u8> {
    let mut settings = Settings::load(&Sources::from_process())?;
    let lifted = match profile {
        Some(name) => config::apply_profile(&mut settings, name)?,
        None => Vec::new(),
    };
    let _log = telemetry::init(&settings.log);
    if let Some(name) = profile {
        tracing::warn!(
            profile = name,
            "PROFILE {name}: NOT FOR PRODUCTION: lifted {}",
            lifted.join(", ")
        );
    }
    let app = Application::build(settings).await?;
    app.run_until_stopped(shutdown_signal()).await?;
    Ok(0)
}

/// `verify` without a file: the configured database checked where it stands.
async fn verify_in_place() -> anyhow::Result<u8> {
    let settings = Settings::load(&Sources::from_process())?;
    let which = if backup::is_sqlite(&settings.database.url) {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    let db = store::connect(&settings.database).await?;
    let outcome = backup::verify_in_place(&db).await;
    db.close().await?;
    match outcome {
        Ok(held) => {
            println!(
                "ok: the configured {which} database holds every money invariant and reference ({} orders, {} partners)",
                held.orders, held.partners
            );
            Ok(0)
        }
        Err(unfit) => {
            println!("FAILED: the configured {which} database: {unfit}");
            Ok(1)
        }
    }
}

/// `backup --to FILE`: the configured SQLite database, copied and checked.
async fn backup(to: &std::path::Path) -> anyhow::Result<u8> {
    let settings = Settings::load(&Sources::from_process())?;
    if !backup::is_sqlite(&settings.database.url) {
        anyhow::bail!(
            "`backup` copies the embedded SQLite database; `database.url` is not SQLite (back PostgreSQL up with its own tools)"
        );
    }
    // The service's own connection settings (WAL, busy timeout).
    let db = store::connect(&settings.database).await?;
    let report = backup::take(&db, to).await?;
    println!(
        "copied {} bytes in {} ms to {}: {} orders, {} partners",
        report.bytes,
        report.took_ms,
        report.path.display(),
        report.orders,
        report.partners
    );
    match backup::verify(to).await {
        Ok(_) => {
            println!("verified: SQLite's integrity check and every money invariant pass");
            Ok(0)
        }
        Err(unfit) => {
            println!("FAILED: the copy does not verify: {unfit}");
            Ok(1)
        }
    }
}

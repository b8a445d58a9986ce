//! `spawn_app()` and typed helpers for the partner and operator APIs.

use std::{sync::OnceLock, time::Duration};

use esim_reseller::{
    app::Application,
    config::{Settings, Sources},
    store::Db,
    telemetry,
};
use reqwest::{Method, Response, StatusCode};
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub const OPERATOR_TOKEN: &str = "test-operator-token-0123456789";

/// A four-eyes limit above any single movement (the largest is $10,000,000).
pub const NO_FOUR_EYES: &str = "100000000000";

/// A running service and what a test needs to talk to it.
pub struct TestApp {
    /// `http://127.0.0.1:<port>` of the partner listener.
    pub public: String,
    /// `http://127.0.0.1:<port>` of the operator listener.
    pub operator: String,
    /// `http://127.0.0.1:<port>` of the simulators listener.
    #[allow(dead_code)]
    pub simulators: Option<String>,
    /// The service's own pool, for sabotage and for reading what was stored.
    pub db: Db,
    /// The database URL, so that a second node can share the database.
    pub database_url: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _sqlite_dir: Option<tempfile::TempDir>,
    postgres: Option<PostgresDatabase>,
}

/// Starts the service with the test defaults.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(&[]).await
}

/// Starts the service with extra configuration overrides (dotted keys).
pub async fn spawn_app_with(overrides: &[(&str, &str)]) -> TestApp {
    let (database_url, sqlite_dir, postgres) = match std::env::var("TEST_DATABASE_URL") {
        Ok(base) if !base.is_empty() => {
            let database = PostgresDatabase::create(&base).await;
            (database.url.clone(), None, Some(database))
        }
        _ => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}/esim.db?mode=rwc", dir.path().display());
            (url, Some(dir), None)
        }
    };
    let mut app = spawn_node(&database_url, overrides).await;
    app._sqlite_dir = sqlite_dir;
    app.postgres = postgres;
    app
}

/// Starts another node of the service on an existing database (the first
/// node owns the database and cleans it up).
pub async fn spawn_node(database_url: &str, overrides: &[(&str, &str)]) -> TestApp {
    // Kept for the whole test process: its writer thread writes the lines.
    static LOGS: OnceLock<telemetry::LogGuard> = OnceLock::new();
    esim_reseller::install_tls_provider();
    let mut all: Vec<(String, String)> = vec![
        ("http.public_addr".into(), "127.0.0.1:0".into()),
        ("http.operator_addr".into(), "127.0.0.1:0".into()),
        ("simulators.addr".into(), "127.0.0.1:0".into()),
        ("operator.token".into(), OPERATOR_TOKEN.into()),
        ("database.url".into(), database_url.into()),
        // Most tests fund partners with more than the four-eyes limit and are
        // about something else; the four-eyes tests set the limit back.
        ("operator.four_eyes_cents".into(), NO_FOUR_EYES.into()),
    ];
    all.extend(
        overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let settings = Settings::load(&Sources {
        dir: Some(concat!(env!("CARGO_MANIFEST_DIR"), "/config").into()),
        env: None,
        use_environment: false,
        overrides: all,
    })
    .expect("test configuration loads");
    if std::env::var_os("TEST_LOG").is_some() {
        LOGS.get_or_init(|| telemetry::init(&settings.log));
    }

    let app = Application::build(settings).await.expect("app builds");
    let public = format!("http://{}", app.public_addr());
    let operator = format!("http://{}", app.operator_addr());
    let simulators = app.simulators_addr().map(|a| format!("http://{a}"));
    let db = app.db();
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    TestApp {
        public,
        operator,
        simulators,
        db,
        database_url: database_url.to_owned(),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client"),
        stop: Some(stop),
        server: Some(server),
        _sqlite_dir: None,
        postgres: None,
    }
}

impl TestApp {
    /// A request to the partner API, `path` relative to `/partner/v1`.
    pub fn partner(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}/partner/v1{path}", self.public))
    }

    /// A request to the operator API with the operator token.
    pub fn operator(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}/operator/v1{path}", self.operator))
            .bearer_auth(OPERATOR_TOKEN)
    }

    /// The operator listener's `/metrics` page, as text.
    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.operator))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A request to the operator API with a named operator's `token`.
    pub fn as_operator(&self, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}/operator/v1{path}", self.operator))
            .bearer_auth(token)
    }

    /// Creates a named operator with the bootstrap token: (id, token).
    #[allow(dead_code)]
    pub async fn create_operator(&self, name: &str, role: &str) -> (String, String) {
        let response = self
            .operator(Method::POST, "/operators")
            .json(&json!({ "name": name, "role": role }))
            .send()
            .await
            .expect("send");
        let (status, json) = read(response).await;
        assert_eq!(status, StatusCode::CREATED, "{json}");
        (
            json["id"].as_str().expect("id").to_owned(),
            json["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Creates a partner through the operator API; `extra` is merged into the body.
    pub async fn create_partner(&self, extra: Value) -> Value {
        let mut body = json!({ "name": format!("Partner {}", uuid::Uuid::new_v4()), "tier": "bronze", "status": "live" });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let response = self
            .operator(Method::POST, "/partners")
            .json(&body)
            .send()
            .await
            .expect("send");
        let (status, json) = read(response).await;
        assert_eq!(status, StatusCode::CREATED, "{json}");
        json
    }

    /// Issues a key and returns the whole answer (with `secret`).
    pub async fn issue_key(&self, partner_id: &str, body: Value) -> Value {
        let response = self
            .operator(Method::POST, &format!("/partners/{partner_id}/keys"))
            .json(&body)
            .send()
            .await
            .expect("send");
        let (status, json) = read(response).await;
        assert_eq!(status, StatusCode::CREATED, "{json}");
        json
    }

    /// A partner API request authenticated with `key`.
    pub fn as_partner(&self, key: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.partner(method, path).bearer_auth(key)
    }

    /// A partner with the given fields (default: bronze, live) and a key of
    /// `mode`; returns (partner, key answer with `secret`).
    pub async fn partner_with_key(&self, partner: Value, mode: &str) -> (Value, Value) {
        let partner = self.create_partner(partner).await;
        let key = self
            .issue_key(partner["id"].as_str().unwrap(), json!({ "mode": mode }))
            .await;
        (partner, key)
    }

    /// Stops the service and waits for it to finish draining. The value
    /// stays alive, and with it the database it owns, so that another node
    /// can go on using that database.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.server.take() {
            Some(server) => server.await.expect("server task"),
            None => Ok(()),
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
        if let Some(database) = self.postgres.take() {
            database.drop_now();
        }
    }
}

/// A live bronze partner with a live key: (partner id, secret).
#[allow(dead_code)]
pub async fn live_partner(app: &TestApp) -> (String, String) {
    let (partner, key) = app.partner_with_key(json!({}), "live").await;
    (
        partner["id"].as_str().unwrap().to_owned(),
        key["secret"].as_str().unwrap().to_owned(),
    )
}

/// The secret of a new sandbox key of the partner.
#[allow(dead_code)]
pub async fn sandbox_key(app: &TestApp, partner_id: &str) -> String {
    app.issue_key(partner_id, json!({ "mode": "sandbox" }))
        .await["secret"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Credits the live float through the account actor (one ledger row).
#[allow(dead_code)]
pub async fn fund(app: &TestApp, partner_id: &str, cents: i64) {
    let (status, body) = read(
        app.operator(Method::POST, &format!("/partners/{partner_id}/movements"))
            .json(&json!({ "kind": "adjustment", "amount_cents": cents, "description": "test funding" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// `GET` a partner route with `secret`: status and JSON body.
#[allow(dead_code)]
pub async fn get(app: &TestApp, secret: &str, path: &str) -> (StatusCode, Value) {
    read(
        app.as_partner(secret, Method::GET, path)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// `POST /orders` with `secret` under Idempotency-Key `key`: status and
/// JSON body.
#[allow(dead_code)]
pub async fn post_order(
    app: &TestApp,
    secret: &str,
    key: &str,
    body: &Value,
) -> (StatusCode, Value) {
    read(
        app.as_partner(secret, Method::POST, "/orders")
            .header("Idempotency-Key", key)
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// The balance the key's mode sees, read through `GET /balance`.
#[allow(dead_code)]
pub async fn balance(app: &TestApp, secret: &str) -> i64 {
    let (status, body) = get(app, secret, "/balance").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["balance_cents"].as_i64().unwrap()
}

/// Status and JSON body of a response (`Value::Null` for an empty body).
pub async fn read(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let json = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"))
    };
    (status, json)
}

/// Asserts the spec's error envelope and returns the `error` object.
pub fn assert_error(status: StatusCode, body: &Value, expected_status: u16, code: &str) -> Value {
    assert_eq!(status.as_u16(), expected_status, "{body}");
    let error = body["error"].clone();
    assert_eq!(error["code"], code, "{body}");
    for field in ["type", "code", "message", "doc_url", "request_id"] {
        assert!(error[field].is_string(), "missing {field}: {body}");
    }
    assert!(error.get("param").is_some(), "missing param: {body}");
    let anchor = code.replace('.', "-");
    assert!(
        error["doc_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/errors#{anchor}")),
        "{body}"
    );
    error
}

/// The first pause between two of [`eventually`]'s polls.
const FIRST_PAUSE: Duration = Duration::from_millis(25);

/// The longest pause between two of [`eventually`]'s polls: four polls a
/// second, well under a bronze key's ten reads.
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

#[allow(dead_code)] // used by the order and deposit tests
/// Polls `check` until it returns `Some`, or panics at the deadline.
///
/// The pauses between polls double from 25 ms to 250 ms: what settles
/// quickly is seen quickly, and a long wait that reads a partner endpoint
/// (most wait for an order) leaves room in the key's read window for the
/// reads the test makes after it, on the default rate limits too.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        let now = tokio::time::Instant::now();
        assert!(now < until, "timed out waiting for {what}");
        tokio::time::sleep(pause.min(until - now)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// What `TEST_DATABASE_OPTIONS` adds to each test database's `CREATE
/// DATABASE` (for example a locale of its own: `TEMPLATE template0
/// LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'`); nothing unless
/// set.
fn database_options() -> String {
    std::env::var("TEST_DATABASE_OPTIONS").unwrap_or_default()
}

/// A throw-away PostgreSQL database, dropped with the test.
struct PostgresDatabase {
    base: String,
    name: String,
    url: String,
}

impl PostgresDatabase {
    async fn create(base: &str) -> Self {
        let name = format!("esim_test_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(base)
            .await
            .expect("connect to TEST_DATABASE_URL");
        admin
            .execute_unprepared(&format!(
                "CREATE DATABASE \"{name}\" {}",
                database_options()
            ))
            .await
            .expect("create test database");
        let _ = admin.close().await;
        Self {
            url: replace_database(base, &name),
            base: base.to_owned(),
            name,
        }
    }

    /// Drops the database from a fresh thread (Drop cannot await).
    fn drop_now(self) {
        let handle = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let admin = Database::connect(&self.base).await?;
                admin
                    .execute_unprepared(&format!(
                        "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                        self.name
                    ))
                    .await?;
                admin.close().await?;
                anyhow::Ok(())
            })
        });
        let _ = handle.join();
    }
}

/// `postgres://u@h:p/db?x` with `db` replaced by `name`.
fn replace_database(base: &str, name: &str) -> String {
    let (without_query, query) = base
        .split_once('?')
        .map_or((base, None), |(a, b)| (a, Some(b)));
    let authority_end = without_query.find("://").map_or(0, |i| i + 3);
    let path_start = without_query[authority_end..]
        .find('/')
        .map_or(without_query.len(), |i| authority_end + i);
    let mut url = format!("{}/{name}", &without_query[..path_start]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// The real binary running `serve` with JSON logs captured line by line.
#[allow(dead_code)] // used by the secrets and lifecycle suites
pub struct ServeProcess {
    child: tokio::process::Child,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    collector: tokio::task::JoinHandle<()>,
    /// `host:port` of the partner listener.
    pub public: String,
    /// `host:port` of the operator listener.
    pub operator: String,
    _dir: tempfile::TempDir,
}

#[allow(dead_code)]
impl ServeProcess {
    /// Starts `serve` on a fresh SQLite database and ephemeral ports, with
    /// JSON logs and the extra `ESIM__*` variables, and waits for its listeners.
    pub async fn start(envs: &[(&str, &str)]) -> Self {
        use tokio::io::AsyncBufReadExt;
        esim_reseller::install_tls_provider();
        let dir = tempfile::tempdir().expect("temp dir");
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_esim-reseller"));
        command
            .arg("serve")
            .env(
                "ESIM__DATABASE__URL",
                format!("sqlite://{}/s.db?mode=rwc", dir.path().display()),
            )
            .env("ESIM__HTTP__PUBLIC_ADDR", "127.0.0.1:0")
            .env("ESIM__HTTP__OPERATOR_ADDR", "127.0.0.1:0")
            .env("ESIM__SIMULATORS__ADDR", "127.0.0.1:0")
            .env("ESIM__LOG__FORMAT", "json")
            .env("ESIM__OPERATOR__FOUR_EYES_CENTS", NO_FOUR_EYES)
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start the binary");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let collector = {
            let log = log.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    log.lock().expect("log lock").push(line);
                }
            })
        };
        let address = |listener: &'static str| {
            let log = log.clone();
            async move {
                log.lock().expect("log lock").iter().find_map(|line| {
                    let json: Value = serde_json::from_str(line).ok()?;
                    (json["listener"] == listener)
                        .then(|| json["addr"].as_str().map(str::to_owned))
                        .flatten()
                })
            }
        };
        let public = eventually("the public listener", Duration::from_secs(30), || {
            address("public")
        })
        .await;
        let operator = eventually("the operator listener", Duration::from_secs(30), || {
            address("operator")
        })
        .await;
        Self {
            child,
            log,
            collector,
            public,
            operator,
            _dir: dir,
        }
    }

    /// A call to this process's operator API with `token`, answered as JSON.
    pub async fn operator_call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Value,
    ) -> Value {
        reqwest::Client::new()
            .request(
                method,
                format!("http://{}/operator/v1{path}", self.operator),
            )
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("operator call")
            .json()
            .await
            .expect("operator answer is JSON")
    }

    /// A live gold partner with a live key: (partner, key answer with `secret`).
    pub async fn live_partner(&self, token: &str) -> (Value, Value) {
        let partner = self
            .operator_call(
                token,
                Method::POST,
                "/partners",
                json!({ "name": format!("Partner {}", uuid::Uuid::new_v4()), "tier": "gold", "status": "live" }),
            )
            .await;
        let id = partner["id"].as_str().expect("partner id");
        let key = self
            .operator_call(
                token,
                Method::POST,
                &format!("/partners/{id}/keys"),
                json!({ "mode": "live" }),
            )
            .await;
        (partner, key)
    }

    /// Credits `cents` to a partner's live float through this process's
    /// operator API (an adjustment, one ledger row).
    pub async fn fund(&self, token: &str, partner_id: &str, cents: i64) {
        let entry = self
            .operator_call(
                token,
                Method::POST,
                &format!("/partners/{partner_id}/movements"),
                json!({ "kind": "adjustment", "amount_cents": cents, "description": "test funding" }),
            )
            .await;
        assert!(entry["id"].is_string(), "{entry}");
    }

    /// `POST /orders` of `quantity` units of `plan` with `secret` and a new
    /// Idempotency-Key: the status and the answer.
    pub async fn order(&self, secret: &str, plan: &str, quantity: u32) -> (StatusCode, Value) {
        read(
            reqwest::Client::new()
                .post(format!("http://{}/partner/v1/orders", self.public))
                .bearer_auth(secret)
                .header("idempotency-key", uuid::Uuid::new_v4().to_string())
                .json(&json!({ "plan_id": plan, "quantity": quantity }))
                .send()
                .await
                .expect("order request"),
        )
        .await
    }

    /// `host:port` of one of its listeners (`public`, `operator`,
    /// `simulators`), from its `listening` log line.
    pub fn listener(&self, name: &str) -> Option<String> {
        self.lines().iter().find_map(|line| {
            let json: Value = serde_json::from_str(line).ok()?;
            (json["listener"] == name)
                .then(|| json["addr"].as_str().map(str::to_owned))
                .flatten()
        })
    }

    /// The log lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// Kills the process (SIGKILL) and returns its whole log.
    pub async fn kill(mut self) -> Vec<String> {
        let _ = self.child.start_kill();
        self.finish().await
    }

    /// Asks the process to stop (SIGTERM), waits for it, and returns its whole log.
    pub async fn terminate(mut self) -> Vec<String> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        self.finish().await
    }

    async fn finish(&mut self) -> Vec<String> {
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        let _ = (&mut self.collector).await;
        self.lines()
    }
}

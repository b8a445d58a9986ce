//! The pages people open, opened in a real browser: headless Chromium,
//! driven over the DevTools protocol (chromiumoxide).
//!
//! Every `/docs` page is reached by following links from the index: each
//! loads with no console error, no uncaught exception and no failed load
//! (a broken link's 404 is one), shows its navigation, and is saved as a
//! screenshot under the test binary's temporary folder for people to look at.
//! The console is driven the same way: every page as an administrator, a
//! review approved from its form, and what a viewer and a finance operator
//! are offered on the reviews, approvals and audit pages.
//!
//! Chromium is `$CHROMIUM` or `/usr/bin/chromium` (Debian's `chromium`). A
//! machine without it skips these tests, unless `BROWSER_TESTS_REQUIRED=1`
//! (set by `.ci/run`, which installs it).

use std::{
    collections::BTreeSet,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use chromiumoxide::{
    Browser, BrowserConfig, Page,
    cdp::{
        browser_protocol::log::{EventEntryAdded, LogEntryLevel},
        js_protocol::runtime::{ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown},
    },
    page::ScreenshotParams,
};
use futures::StreamExt;

use crate::helpers::{eventually, spawn_app};

/// The browser to drive, or `None` to skip (only when it is not required).
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let required = std::env::var("BROWSER_TESTS_REQUIRED").is_ok_and(|v| v == "1");
    match (path.exists(), required) {
        (true, _) => Some(path),
        (false, true) => panic!(
            "browser tests are required but there is no Chromium at {}",
            path.display()
        ),
        (false, false) => {
            eprintln!(
                "skipping: no Chromium at {} (set CHROMIUM, or install Debian's chromium)",
                path.display()
            );
            None
        }
    }
}

/// A headless browser with its own profile; dropped with the test.
struct Headless {
    browser: Browser,
    _profile: tempfile::TempDir,
    _events: tokio::task::JoinHandle<()>,
}

impl Headless {
    async fn launch(executable: PathBuf) -> Self {
        let profile = tempfile::tempdir().unwrap();
        let config = BrowserConfig::builder()
            .chrome_executable(executable)
            .no_sandbox()
            .new_headless_mode()
            .window_size(1200, 1600)
            .user_data_dir(profile.path())
            .launch_timeout(Duration::from_secs(30))
            .request_timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let (browser, mut handler) = Browser::launch(config).await.unwrap();
        let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Self {
            browser,
            _profile: profile,
            _events: events,
        }
    }
}

/// What went wrong on a page, as the browser reported it.
#[derive(Clone, Default)]
struct Problems(Arc<Mutex<Vec<String>>>);

impl Problems {
    fn push(&self, problem: String) {
        self.0.lock().unwrap().push(problem);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    /// Listens for console errors, uncaught exceptions and failed loads.
    async fn watch(page: &Page) -> Self {
        let problems = Self::default();
        page.enable_log().await.unwrap();
        page.enable_runtime().await.unwrap();
        let mut console = page
            .event_listener::<EventConsoleApiCalled>()
            .await
            .unwrap();
        let mut exceptions = page.event_listener::<EventExceptionThrown>().await.unwrap();
        let mut log = page.event_listener::<EventEntryAdded>().await.unwrap();
        let sink = problems.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    Some(event) = console.next() => {
                        if matches!(event.r#type, ConsoleApiCalledType::Error | ConsoleApiCalledType::Assert) {
                            sink.push(format!("console error: {:?}", event.args.first().and_then(|a| a.value.clone())));
                        }
                    }
                    Some(event) = exceptions.next() => sink.push(format!("exception: {}", event.exception_details.text)),
                    Some(event) = log.next() => {
                        if event.entry.level == LogEntryLevel::Error {
                            sink.push(format!("{}: {}", event.entry.url.clone().unwrap_or_default(), event.entry.text));
                        }
                    }
                    else => break,
                }
            }
        });
        problems
    }
}

/// The links of the page the browser shows, resolved to absolute URLs.
async fn links(page: &Page) -> Vec<String> {
    page.evaluate("Array.from(document.querySelectorAll('a[href]'), a => a.href)")
        .await
        .unwrap()
        .into_value()
        .unwrap()
}

/// Full-page screenshots saved as PNG under the test binary's temporary folder.
struct Screenshots(PathBuf);

impl Screenshots {
    fn in_folder(name: &str) -> Self {
        let folder = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::create_dir_all(&folder).unwrap();
        Self(folder)
    }

    /// Saves what `page` shows as `<name>.png`.
    async fn take(&self, page: &Page, name: &str) {
        let shot = page
            .screenshot(ScreenshotParams::builder().full_page(true).build())
            .await
            .unwrap();
        std::fs::write(self.0.join(format!("{name}.png")), shot).unwrap();
    }
}

/// A screenshot's name for `url`: its path under `origin`, `/` as `-`.
fn shot_name(origin: &str, url: &str) -> String {
    url.trim_start_matches(origin)
        .trim_matches('/')
        .replace('/', "-")
}

/// Opens `start` and every page reachable from it by links under `within`,
/// once each (fragments aside), calling `visit` with each URL while the
/// browser shows it; returns the URLs opened.
async fn crawl(
    page: &Page,
    start: String,
    within: &str,
    mut visit: impl AsyncFnMut(&str),
) -> BTreeSet<String> {
    let mut queue = vec![start];
    let mut seen = BTreeSet::new();
    while let Some(url) = queue.pop() {
        if !seen.insert(url.clone()) {
            continue;
        }
        page.goto(url.as_str()).await.unwrap();
        visit(&url).await;
        for link in links(page).await {
            let link = link.split('#').next().unwrap_or_default().to_owned();
            if link.starts_with(within) {
                queue.push(link);
            }
        }
    }
    seen
}

#[tokio::test]
async fn every_docs_page_opens_cleanly_in_a_real_browser() {
    let Some(executable) = chromium() else {
        return;
    };
    let app = spawn_app().await;
    let headless = Headless::launch(executable).await;
    let page = headless.browser.new_page("about:blank").await.unwrap();
    let problems = Problems::watch(&page).await;
    let shots = Screenshots::in_folder("docs-screenshots");

    let origin = app.public.clone();
    let seen = crawl(
        &page,
        format!("{origin}/docs"),
        &format!("{origin}/docs"),
        async |url| {
            let title = page.get_title().await.unwrap().unwrap_or_default();
            assert!(
                title.contains("partner API v1"),
                "{url} has the title {title:?}"
            );
            assert!(
                page.find_element("nav a[href='/docs/quickstart']")
                    .await
                    .is_ok(),
                "{url} has no navigation"
            );
            let found = problems.take();
            assert!(found.is_empty(), "{url}: {found:#?}");
            shots.take(&page, &shot_name(&origin, url)).await;
        },
    )
    .await;
    for expected in [
        "/docs/quickstart",
        "/docs/api",
        "/docs/errors",
        "/docs/changelog",
        "/docs/guides/deposits",
    ] {
        assert!(
            seen.contains(&format!("{origin}{expected}")),
            "the browser never reached {expected}"
        );
    }

    // A page that fails is caught: the check is worth something.
    page.goto(format!("{origin}/docs/guides/no-such-guide").as_str())
        .await
        .unwrap();
    let found = problems.take();
    assert!(
        found.iter().any(|p| p.contains("404")),
        "a 404 went unnoticed: {found:?}"
    );
}

/// The text the browser shows (not the HTML source).
async fn text(page: &Page) -> String {
    try_text(page).await.unwrap()
}

/// The text shown, or why it could not be read (a page still loading has
/// no document to ask yet).
async fn try_text(page: &Page) -> Result<String, String> {
    page.evaluate("document.body.innerText")
        .await
        .map_err(|e| e.to_string())?
        .into_value()
        .map_err(|e| e.to_string())
}

/// Clicks `selector` (a button that submits a form), then waits until the
/// page shows `expected`: the page the form leads to.
async fn click_until(page: &Page, selector: &str, expected: &str) -> String {
    page.find_element(selector)
        .await
        .unwrap_or_else(|e| panic!("no {selector}: {e}"))
        .click()
        .await
        .unwrap();
    // While the next page loads, its text may not be readable yet.
    let what = format!("the page after clicking {selector} to show {expected:?}");
    eventually(&what, Duration::from_secs(15), || async {
        try_text(page)
            .await
            .ok()
            .filter(|shown| shown.contains(expected))
    })
    .await
}

#[tokio::test]
async fn an_operator_signs_in_to_the_console_and_approves_a_deposit_in_a_real_browser() {
    let Some(executable) = chromium() else {
        return;
    };
    let app = crate::deposits::deposits_app().await;
    let (partner_id, secret) = crate::helpers::live_partner(&app).await;
    let (_, review) = crate::reviews::paid_after_credit(&app, &secret).await;
    let review_id = review["id"].as_str().unwrap();
    let headless = Headless::launch(executable).await;
    let page = headless.browser.new_page("about:blank").await.unwrap();
    let problems = Problems::watch(&page).await;
    let shots = Screenshots::in_folder("console-screenshots");
    let origin = app.operator.clone();

    // Signed out, the console sends the browser to its sign-in form.
    page.goto(format!("{origin}/console").as_str())
        .await
        .unwrap();
    assert_eq!(
        page.url().await.unwrap().unwrap(),
        format!("{origin}/console/login")
    );
    shots.take(&page, "login").await;
    page.find_element("#token")
        .await
        .unwrap()
        .click()
        .await
        .unwrap()
        .type_str(crate::helpers::OPERATOR_TOKEN)
        .await
        .unwrap();
    click_until(
        &page,
        "main form button[type=submit]",
        "deposits waiting for review",
    )
    .await;

    // Every page of the console opens cleanly, reached by its links.
    let seen = crawl(
        &page,
        format!("{origin}/console"),
        &format!("{origin}/console"),
        async |url| {
            assert_eq!(page.url().await.unwrap().unwrap(), url, "still signed in");
            let found = problems.take();
            assert!(found.is_empty(), "{url}: {found:#?}");
            shots.take(&page, &shot_name(&origin, url)).await;
        },
    )
    .await;
    assert_eq!(
        seen.len(),
        9,
        "overview, partners, the partner, orders, reviews, approvals, actors, suppliers, audit: {seen:?}"
    );
    page.goto(format!("{origin}/console/partners").as_str())
        .await
        .unwrap();
    assert!(text(&page).await.contains("$200.00"), "the float before");
    shots.take(&page, "partners-before").await;

    // The review: a note, then the approve button.
    page.goto(format!("{origin}/console/reviews").as_str())
        .await
        .unwrap();
    shots.take(&page, "reviews-open").await;
    let form = format!("#decide-{review_id}");
    page.find_element(format!("{form} input[name=note]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap()
        .type_str("paid late on lightning; checked in BTCPay")
        .await
        .unwrap();
    click_until(
        &page,
        &format!("{form} button[formaction$='/approve']"),
        &format!("Review {review_id} is approved"),
    )
    .await;
    shots.take(&page, "reviews-approved").await;

    // The balance changed, on the console and for the partner.
    page.goto(format!("{origin}/console/partners").as_str())
        .await
        .unwrap();
    let shown = text(&page).await;
    assert!(
        shown.contains("$500.00") && shown.contains(&partner_id),
        "{shown}"
    );
    shots.take(&page, "partners-after").await;
    assert_eq!(crate::helpers::balance(&app, &secret).await, 50_000);
    let found = problems.take();
    assert!(found.is_empty(), "{found:#?}");
}

/// Signs in on the console's form with `token` and waits for the overview.
async fn sign_in_with(page: &Page, origin: &str, token: &str) {
    page.goto(format!("{origin}/console/login").as_str())
        .await
        .unwrap();
    page.find_element("#token")
        .await
        .unwrap()
        .click()
        .await
        .unwrap()
        .type_str(token)
        .await
        .unwrap();
    click_until(page, "main form button[type=submit]", "Signed in as").await;
}

/// How many forms, buttons and fields the page shows that would decide
/// money: anything posting to an approve or reject route, and note fields.
async fn money_forms(page: &Page) -> u64 {
    let selector = "form[action$='/approve'], form[action$='/reject'], \
        button[formaction$='/approve'], button[formaction$='/reject'], input[name=note]";
    page.evaluate(format!("document.querySelectorAll(\"{selector}\").length"))
        .await
        .unwrap()
        .into_value()
        .unwrap()
}

/// Whether anything on the page is wider than the window (a table or a
/// form running off its right edge).
async fn overflows(page: &Page) -> bool {
    page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        .await
        .unwrap()
        .into_value()
        .unwrap()
}

#[tokio::test]
async fn a_viewer_is_offered_no_money_forms_and_a_second_finance_operator_approves_in_a_real_browser()
 {
    let Some(executable) = chromium() else {
        return;
    };
    let overrides: Vec<(&str, &str)> = crate::deposits::UNTHROTTLED
        .iter()
        .copied()
        .chain([("operator.four_eyes_cents", "100000")])
        .collect();
    let app = crate::helpers::spawn_app_with(&overrides).await;
    let (partner_id, secret) = crate::helpers::live_partner(&app).await;
    let (_, review) = crate::reviews::paid_after_credit(&app, &secret).await;
    let review_id = review["id"].as_str().unwrap();
    let (_, vera) = app.create_operator("Vera Viewer", "viewer").await;
    let (_, fiona) = app.create_operator("Fiona Finance", "finance").await;
    let (_, frank) = app.create_operator("Frank Finance", "finance").await;
    let approval = crate::console::held_adjustment(&app, &fiona, &partner_id).await;
    let headless = Headless::launch(executable).await;
    let page = headless.browser.new_page("about:blank").await.unwrap();
    let problems = Problems::watch(&page).await;
    let shots = Screenshots::in_folder("console-screenshots");
    let origin = app.operator.clone();

    // A viewer sees the open review and the held adjustment, and no form to decide them.
    sign_in_with(&page, &origin, &vera).await;
    for (path, shown, shot) in [
        ("/console/reviews", review_id, "viewer-reviews"),
        ("/console/approvals", approval.as_str(), "viewer-approvals"),
    ] {
        page.goto(format!("{origin}{path}").as_str()).await.unwrap();
        let text = text(&page).await;
        assert!(text.contains("Signed in as Vera Viewer (viewer)"), "{text}");
        assert!(
            text.contains(shown) && text.contains("need the finance role"),
            "{text}"
        );
        assert_eq!(money_forms(&page).await, 0, "{path}: {text}");
        shots.take(&page, shot).await;
        assert!(!overflows(&page).await, "{path} is wider than the window");
    }
    click_until(&page, "header form button[type=submit]", "Operator token").await;

    // The second finance operator sees the forms and approves: the money moves.
    sign_in_with(&page, &origin, &frank).await;
    page.goto(format!("{origin}/console/approvals").as_str())
        .await
        .unwrap();
    assert!(money_forms(&page).await > 0, "{}", text(&page).await);
    shots.take(&page, "finance-approvals").await;
    assert!(
        !overflows(&page).await,
        "the approvals are wider than the window"
    );
    let form = format!("#decide-{approval}");
    page.find_element(format!("{form} input[name=note]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap()
        .type_str("matches the bank statement")
        .await
        .unwrap();
    click_until(
        &page,
        &format!("{form} button[formaction$='/approve']"),
        &format!("Approval {approval} is approved."),
    )
    .await;
    shots.take(&page, "finance-approvals-decided").await;
    assert_eq!(crate::helpers::balance(&app, &secret).await, 520_000);

    // The audit page tells the story, with names.
    page.goto(format!("{origin}/console/audit").as_str())
        .await
        .unwrap();
    let text = text(&page).await;
    for expected in [
        "approval.approve",
        "Frank Finance",
        "movement.create",
        "Fiona Finance",
        "console.sign_in",
        "Vera Viewer",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    shots.take(&page, "audit").await;
    assert!(
        !overflows(&page).await,
        "the audit trail is wider than the window"
    );
    let found = problems.take();
    assert!(found.is_empty(), "{found:#?}");
}

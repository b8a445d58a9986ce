//! No silent breaking change: `openapi.json` against the last published copy
//! of the contract, `docs/openapi-published.json`.
//!
//! What a partner's code or generated client relies on must survive a new
//! document:
//! - every published operation (method and path) is still there;
//! - every published parameter is still accepted, and none became required;
//! - every published response status of an operation is still documented;
//! - every schema node the published document reached (through properties,
//!   array items, `oneOf`/`anyOf`/`allOf` and `$ref`s, followed on both sides)
//!   is still there: a property is not removed; a `type` keeps every JSON type
//!   it allowed (no narrowing, `null` included); an `enum` keeps every value;
//! - a request body gains no required property.
//!
//! A change that breaks one of these on purpose updates the published copy in
//! the same commit and says so in `docs/changelog.md`, whose newest entry must
//! name the published copy's revision date (`info.x-revision`; `info.version`
//! stays `v1`, as the spec fixes it).

use std::collections::BTreeSet;

use serde_json::{Value, json};

const PUBLISHED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi-published.json");
const CHANGELOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/changelog.md");

/// Where a breaking change is, and what it is.
type Breaks = Vec<String>;

/// Every way `current` breaks a client written against `published`.
pub fn breaking_changes(published: &Value, current: &Value) -> Breaks {
    let mut breaks = Vec::new();
    let Some(paths) = published["paths"].as_object() else {
        return vec!["the published document has no paths".to_owned()];
    };
    for (path, item) in paths {
        let Some(methods) = item.as_object() else {
            continue;
        };
        for (method, old_op) in methods {
            let at = format!("{} {path}", method.to_uppercase());
            let new_op = &current["paths"][path][method];
            if new_op.is_null() {
                breaks.push(format!("{at}: the operation was removed"));
                continue;
            }
            compare_parameters(&at, old_op, new_op, &mut breaks);
            compare_responses(&at, published, current, old_op, new_op, &mut breaks);
            let (old_body, new_body) = (
                &old_op["requestBody"]["content"]["application/json"]["schema"],
                &new_op["requestBody"]["content"]["application/json"]["schema"],
            );
            if !old_body.is_null() {
                let mut walk = Walk::new(published, current, Direction::Request);
                walk.compare(&format!("{at} request body"), old_body, new_body);
                breaks.append(&mut walk.breaks);
            }
        }
    }
    breaks
}

fn compare_parameters(at: &str, old_op: &Value, new_op: &Value, breaks: &mut Breaks) {
    let key = |p: &Value| {
        (
            p["name"].as_str().unwrap_or("").to_ascii_lowercase(),
            p["in"].clone(),
        )
    };
    let new_params: Vec<&Value> = new_op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    for old in old_op["parameters"].as_array().into_iter().flatten() {
        let name = old["name"].as_str().unwrap_or("?");
        match new_params.iter().find(|p| key(p) == key(old)) {
            None => breaks.push(format!("{at}: parameter `{name}` was removed")),
            Some(new) => {
                if new["required"] == json!(true) && old["required"] != json!(true) {
                    breaks.push(format!("{at}: parameter `{name}` became required"));
                }
                if let Some(values) = old["schema"]["enum"].as_array() {
                    for value in values {
                        let kept = new["schema"]["enum"]
                            .as_array()
                            .is_none_or(|now| now.contains(value));
                        if !kept {
                            breaks.push(format!(
                                "{at}: parameter `{name}` no longer accepts {value}"
                            ));
                        }
                    }
                }
            }
        }
    }
}

fn compare_responses(
    at: &str,
    published: &Value,
    current: &Value,
    old_op: &Value,
    new_op: &Value,
    breaks: &mut Breaks,
) {
    let Some(responses) = old_op["responses"].as_object() else {
        return;
    };
    for (status, old) in responses {
        let new = &new_op["responses"][status];
        if new.is_null() {
            breaks.push(format!("{at}: response {status} is no longer documented"));
            continue;
        }
        let old_schema = &old["content"]["application/json"]["schema"];
        if !old_schema.is_null() {
            let mut walk = Walk::new(published, current, Direction::Response);
            walk.compare(
                &format!("{at} {status}"),
                old_schema,
                &new["content"]["application/json"]["schema"],
            );
            breaks.append(&mut walk.breaks);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Request,
    Response,
}

/// A walk over a published schema and its current counterpart.
struct Walk<'a> {
    published: &'a Value,
    current: &'a Value,
    direction: Direction,
    /// `(published $ref, current $ref)` pairs already compared: schemas refer
    /// to each other, and each pair is compared once.
    seen: BTreeSet<(String, String)>,
    breaks: Breaks,
}

impl<'a> Walk<'a> {
    fn new(published: &'a Value, current: &'a Value, direction: Direction) -> Self {
        Self {
            published,
            current,
            direction,
            seen: BTreeSet::new(),
            breaks: Vec::new(),
        }
    }

    fn compare(&mut self, at: &str, old: &Value, new: &Value) {
        let (old_ref, new_ref) = (reference(old), reference(new));
        if old_ref.is_some() || new_ref.is_some() {
            let pair = (old_ref.unwrap_or_default(), new_ref.unwrap_or_default());
            if !self.seen.insert(pair) {
                return;
            }
        }
        let old = resolve(self.published, old);
        let new = resolve(self.current, new);
        if new.is_null() {
            self.breaks.push(format!("{at}: removed"));
            return;
        }
        self.compare_types(at, old, new);
        self.compare_enum(at, old, new);
        self.compare_properties(at, old, new);
        if !old["items"].is_null() {
            self.compare(&format!("{at}[]"), &old["items"], &new["items"]);
        }
        for combinator in ["oneOf", "anyOf", "allOf"] {
            let olds = old[combinator].as_array().into_iter().flatten();
            for (index, branch) in olds.enumerate() {
                let counterpart =
                    matching_branch(self.published, self.current, branch, &new[combinator]);
                match counterpart {
                    Some(found) => {
                        self.compare(&format!("{at}.{combinator}[{index}]"), branch, &found)
                    }
                    None => self
                        .breaks
                        .push(format!("{at}: {combinator} branch {index} was removed")),
                }
            }
        }
    }

    fn compare_types(&mut self, at: &str, old: &Value, new: &Value) {
        let (before, after) = (types_of(self.published, old), types_of(self.current, new));
        if before.is_empty() || after.is_empty() {
            return; // untyped on one side: anything goes
        }
        let lost: Vec<&String> = before.difference(&after).collect();
        // An integer is still a number; a number is not always an integer.
        let lost: Vec<&String> = lost
            .into_iter()
            .filter(|t| !(t.as_str() == "integer" && after.contains("number")))
            .collect();
        if !lost.is_empty() {
            self.breaks
                .push(format!("{at}: type narrowed, no longer {lost:?}"));
        }
    }

    fn compare_enum(&mut self, at: &str, old: &Value, new: &Value) {
        let Some(values) = old["enum"].as_array() else {
            return;
        };
        let now = new["enum"].as_array();
        for value in values {
            if now.is_some_and(|now| !now.contains(value)) {
                self.breaks
                    .push(format!("{at}: enum value {value} was removed"));
            }
        }
    }

    fn compare_properties(&mut self, at: &str, old: &Value, new: &Value) {
        if let Some(properties) = old["properties"].as_object() {
            for (name, schema) in properties {
                let counterpart = &new["properties"][name];
                if counterpart.is_null() && new["additionalProperties"] != json!(true) {
                    self.breaks.push(format!("{at}.{name}: field removed"));
                    continue;
                }
                if !counterpart.is_null() {
                    self.compare(&format!("{at}.{name}"), schema, counterpart);
                }
            }
        }
        let required = |schema: &Value| -> BTreeSet<String> {
            schema["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        let (before, after) = (required(old), required(new));
        match self.direction {
            Direction::Request => {
                for name in after.difference(&before) {
                    self.breaks.push(format!("{at}.{name}: became required"));
                }
            }
            Direction::Response => {
                for name in before.difference(&after) {
                    self.breaks
                        .push(format!("{at}.{name}: no longer always present"));
                }
            }
        }
    }
}

/// The `$ref` of a schema, if it is one.
fn reference(schema: &Value) -> Option<String> {
    schema["$ref"].as_str().map(str::to_owned)
}

/// A schema with its `$ref` followed (within the same document).
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => doc.pointer(pointer).unwrap_or(&Value::Null),
        None => schema,
    }
}

/// The JSON types a schema allows (`type` as a string or a list, and `null`
/// from a `oneOf` branch).
fn types_of(doc: &Value, schema: &Value) -> BTreeSet<String> {
    let schema = resolve(doc, schema);
    match &schema["type"] {
        Value::String(one) => BTreeSet::from([one.clone()]),
        Value::Array(many) => many
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

/// The current branch of a `oneOf`/`anyOf`/`allOf` that stands for a
/// published one: the same `$ref` name, else the same types.
fn matching_branch(
    published: &Value,
    current: &Value,
    branch: &Value,
    now: &Value,
) -> Option<Value> {
    let branches = now.as_array()?;
    if let Some(name) = reference(branch) {
        let name = name.rsplit('/').next().unwrap_or_default().to_owned();
        return branches
            .iter()
            .find(|b| reference(b).is_some_and(|r| r.ends_with(&format!("/{name}"))))
            .cloned();
    }
    let wanted = types_of(published, branch);
    branches
        .iter()
        .find(|b| reference(b).is_none() && types_of(current, b) == wanted)
        .cloned()
}

fn read_json(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_contract_keeps_everything_the_published_copy_promised() {
    let published = read_json(PUBLISHED);
    let current = esim_reseller::http::openapi::to_value();
    let breaks = breaking_changes(&published, &current);
    assert!(
        breaks.is_empty(),
        "openapi.json breaks the published contract (docs/openapi-published.json):\n  {}\n\
         If this is on purpose, copy openapi.json over docs/openapi-published.json, date \
         the revision (REVISION in src/http/openapi/mod.rs), and add an entry for it to \
         docs/changelog.md.",
        breaks.join("\n  ")
    );
}

#[test]
fn the_changelog_names_the_published_revision() {
    let published = read_json(PUBLISHED);
    let revision = published["info"]["x-revision"]
        .as_str()
        .expect("the published copy has no info.x-revision");
    let changelog = std::fs::read_to_string(CHANGELOG).unwrap();
    let newest = changelog
        .lines()
        .find(|line| line.starts_with("## "))
        .expect("docs/changelog.md has no `## ` entry");
    assert!(
        newest.contains(revision),
        "the newest changelog entry ({newest}) does not name the published revision {revision}"
    );
}

/// Versioning, rule 1: "the description version is `v1`", in the served
/// document and in the published copy alike; revisions are dated apart.
#[test]
fn the_description_version_is_v1() {
    let current = esim_reseller::http::openapi::to_value();
    let published = read_json(PUBLISHED);
    assert_eq!(current["info"]["version"], "v1");
    assert_eq!(published["info"]["version"], "v1");
    assert_eq!(
        current["info"]["x-revision"],
        esim_reseller::http::openapi::REVISION
    );
}

/// The check is only worth something if it fails: each kind of break, made
/// on a copy of the published document, is named.
#[test]
fn the_check_names_each_kind_of_break() {
    let published = read_json(PUBLISHED);
    assert!(breaking_changes(&published, &published).is_empty());
    let schemas = "/components/schemas";

    let mut removed_field = published.clone();
    let order = removed_field
        .pointer_mut(&format!("{schemas}/OrderView/properties"))
        .unwrap();
    order.as_object_mut().unwrap().remove("metadata");
    assert_named(&published, &removed_field, "metadata: field removed");

    let mut removed_value = published.clone();
    let values = removed_value
        .pointer_mut(&format!("{schemas}/OrderStatus/enum"))
        .unwrap();
    values.as_array_mut().unwrap().retain(|v| v != "failed");
    assert_named(
        &published,
        &removed_value,
        "enum value \"failed\" was removed",
    );

    let mut narrowed = published.clone();
    let completed = narrowed
        .pointer_mut(&format!("{schemas}/OrderView/properties/completed_at/type"))
        .unwrap();
    *completed = json!("string");
    assert_named(&published, &narrowed, "completed_at: type narrowed");

    let mut removed_path = published.clone();
    removed_path["paths"]
        .as_object_mut()
        .unwrap()
        .remove("/balance");
    assert_named(
        &published,
        &removed_path,
        "GET /balance: the operation was removed",
    );

    let mut now_required = published.clone();
    let required = now_required
        .pointer_mut(&format!("{schemas}/OrderBody/required"))
        .unwrap();
    required.as_array_mut().unwrap().push(json!("metadata"));
    assert_named(&published, &now_required, "metadata: became required");
}

fn assert_named(published: &Value, changed: &Value, expected: &str) {
    let breaks = breaking_changes(published, changed);
    assert!(
        breaks.iter().any(|b| b.contains(expected)),
        "expected a break naming `{expected}`, got {breaks:#?}"
    );
}

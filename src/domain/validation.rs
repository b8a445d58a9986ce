//! Validation failures, collected before answering so a caller learns all of
//! them at once; the edges turn them into the spec's 400 with `details`.

/// One failed validation rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The offending parameter or field, when there is one.
    pub param: Option<String>,
    /// What is wrong with it.
    pub message: String,
}

/// Collects every validation failure of a request before answering, so the
/// client learns all of them at once (`error.details`).
#[derive(Debug, Default)]
pub struct Violations(Vec<Violation>);

impl Violations {
    /// Records a failure of `param`.
    pub fn add(&mut self, param: impl Into<String>, message: impl Into<String>) {
        self.0.push(Violation {
            param: Some(param.into()),
            message: message.into(),
        });
    }

    /// Records a failure when `failed` holds.
    pub fn check(&mut self, failed: bool, param: &str, message: impl Into<String>) {
        if failed {
            self.add(param, message);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok` when nothing failed, else every failure.
    pub fn into_result(self) -> Result<(), Invalid> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Invalid(self.0))
        }
    }
}

/// The failures of one request, at least one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub Vec<Violation>);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let described: Vec<String> = self
            .0
            .iter()
            .map(|v| match &v.param {
                Some(param) => format!("`{param}`: {}", v.message),
                None => v.message.clone(),
            })
            .collect();
        f.write_str(&described.join("; "))
    }
}

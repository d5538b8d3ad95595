//! `quire bench --variants NAME,...`: running only some variants of the suites, checked against
//! what each suite declares before anything runs.
//!
//! Every [`Suite`](super::Suite) declares the names of its variants. The names asked for are
//! checked here against the suites that will run: a name that is a variant of none of them is
//! an error that lists their variants, and a suite with none of the names is left out of the run
//! (said on standard error). While a suite runs, [`Bench::wants`](super::Bench::wants) tells it
//! whether to run a variant; [`Bench::record`](super::Bench::record) drops the figures of a
//! variant that was not asked for (a figure a suite derives from another variant, such as
//! `evict`'s `default`, is then kept only when its own name was asked for), and
//! [`Bench::compare`](super::Bench::compare) declares no before/after pair one of whose sides
//! is left out, so no change is computed against nothing.

use std::fmt;

/// The variants a run was asked to keep (`--variants`), or all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// `None`: every variant.
    names: Option<Vec<String>>,
}

/// Why `--variants` cannot be used with the suites asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VariantError {
    /// `--variants` was given without a name (or with an empty one, as in `a,,b`).
    EmptyName,
    /// Names that are no variant of any suite to run; with every such suite and its variants.
    Unknown {
        names: Vec<String>,
        suites: Vec<(&'static str, Vec<&'static str>)>,
    },
}

impl fmt::Display for VariantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VariantError::EmptyName => {
                write!(f, "--variants needs variant names, as in --variants a,b")
            }
            VariantError::Unknown { names, suites } => {
                let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
                let (what, these) = if names.len() == 1 {
                    ("no variant named", "it is")
                } else {
                    ("no variants named", "they are")
                };
                match suites.as_slice() {
                    [(suite, variants)] => write!(
                        f,
                        "{what} {} in suite {suite}; its variants are: {}",
                        quoted.join(", "),
                        variants.join(", ")
                    ),
                    _ => {
                        write!(
                            f,
                            "{what} {} in the suites to run ({these} a variant of none); their variants are:",
                            quoted.join(", ")
                        )?;
                        for (suite, variants) in suites {
                            write!(f, "\n  {suite}: {}", variants.join(", "))?;
                        }
                        Ok(())
                    }
                }
            }
        }
    }
}

impl std::error::Error for VariantError {}

impl Selection {
    /// Every variant (no `--variants`).
    pub fn all() -> Selection {
        Selection::default()
    }

    /// The variants `names` (from `--variants`), checked against `suites` (each suite's name and
    /// declared variants): every name must be a variant of at least one of them.
    pub fn new(
        names: &[String],
        suites: &[(&'static str, Vec<&'static str>)],
    ) -> Result<Selection, VariantError> {
        if names.is_empty() || names.iter().any(|n| n.trim().is_empty()) {
            return Err(VariantError::EmptyName);
        }
        let mut unknown: Vec<String> = Vec::new();
        for n in names {
            let known = suites.iter().any(|(_, vs)| vs.contains(&n.as_str()));
            if !known && !unknown.contains(n) {
                unknown.push(n.clone());
            }
        }
        if !unknown.is_empty() {
            return Err(VariantError::Unknown {
                names: unknown,
                suites: suites.to_vec(),
            });
        }
        let mut kept: Vec<String> = Vec::new();
        for n in names {
            if !kept.contains(n) {
                kept.push(n.clone());
            }
        }
        Ok(Selection { names: Some(kept) })
    }

    /// Whether the variant `name` runs.
    pub fn wants(&self, name: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|n| n.iter().any(|x| x == name))
    }

    /// Whether any of `variants` (a suite's) runs: a suite without one is left out.
    pub fn any_of(&self, variants: &[&str]) -> bool {
        variants.iter().any(|v| self.wants(v))
    }

    /// The names asked for, in the order given, once each; `None` for every variant.
    pub fn names(&self) -> Option<&[String]> {
        self.names.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn suites() -> Vec<(&'static str, Vec<&'static str>)> {
        vec![
            ("pagelock", vec!["always-lookup", "waiters-bit", "exact"]),
            ("read", vec!["kernel", "quire"]),
        ]
    }

    #[test]
    fn all_wants_everything() {
        let s = Selection::all();
        assert!(s.wants("anything"));
        assert!(s.any_of(&["x"]));
        assert_eq!(s.names(), None);
    }

    #[test]
    fn chosen_names_only() {
        let s = Selection::new(&names(&["quire", "exact", "quire"]), &suites()).unwrap();
        assert!(s.wants("quire") && s.wants("exact"));
        assert!(!s.wants("kernel") && !s.wants("waiters-bit"));
        assert_eq!(s.names().unwrap(), ["quire", "exact"]);
        assert!(s.any_of(&["kernel", "quire"]));
        assert!(!s.any_of(&["kernel", "always-lookup"]));
    }

    #[test]
    fn unknown_names_are_refused_with_the_suites_variants() {
        let one = vec![("read", vec!["kernel", "quire"])];
        let e = Selection::new(&names(&["quire", "qiure"]), &one).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no variant named \"qiure\" in suite read; its variants are: kernel, quire"
        );
        let e = Selection::new(&names(&["nope", "exact", "nada"]), &suites()).unwrap_err();
        match &e {
            VariantError::Unknown { names, .. } => assert_eq!(names, &["nope", "nada"]),
            other => panic!("{other:?}"),
        }
        let text = e.to_string();
        assert!(
            text.starts_with("no variants named \"nope\", \"nada\""),
            "{text}"
        );
        assert!(
            text.contains("\n  pagelock: always-lookup, waiters-bit, exact"),
            "{text}"
        );
        assert!(text.contains("\n  read: kernel, quire"), "{text}");
        // A name known to another suite only is unknown to this one.
        let e = Selection::new(&names(&["exact"]), &one).unwrap_err();
        assert!(matches!(e, VariantError::Unknown { .. }), "{e:?}");
    }

    #[test]
    fn empty_names_are_refused() {
        assert_eq!(Selection::new(&[], &suites()), Err(VariantError::EmptyName));
        assert_eq!(
            Selection::new(&names(&["quire", ""]), &suites()),
            Err(VariantError::EmptyName)
        );
    }
}

//! Demangling of C++ (Itanium ABI) and Rust (legacy and v0) symbol names.

/// The readable form of a symbol name, or `None` if it is not mangled.
pub fn demangle(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("_R").or_else(|| name.strip_prefix("__R")) {
        if !rest.is_empty() {
            if let Ok(d) = rustc_demangle::try_demangle(name) {
                return Some(format!("{d:#}"));
            }
        }
    }
    if name.starts_with("_ZN") && name.ends_with('E') && name.contains("17h") {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return Some(format!("{d:#}"));
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(s) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return Some(s);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_and_rust() {
        assert_eq!(demangle("_Z4workii").as_deref(), Some("work(int, int)"));
        assert_eq!(
            demangle("_ZN2ns5Klass3runEv").as_deref(),
            Some("ns::Klass::run()")
        );
        assert_eq!(
            demangle("_ZN4core3fmt9Formatter3pad17h0123456789abcdefE").as_deref(),
            Some("core::fmt::Formatter::pad")
        );
        assert_eq!(
            demangle("_RNvCs1234_7mycrate3foo").as_deref(),
            Some("mycrate::foo")
        );
        assert_eq!(demangle("malloc"), None);
    }
}

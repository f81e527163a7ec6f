//! The `unit_texts` list of `parser.py` ("units mainly from MathQA") and its use in
//! `strip_string`: each entry (and the entry plus `s`) is a regular expression removed
//! wherever it stands between non-word characters, two passes in list order. Entries are
//! regexes, so `"a ."` also matches `"a ="`; short entries (`a`, `c`, `m`, `s`, `pm`, …)
//! delete lone letters, e.g. `\pm 2` becomes `\ 2`.

use regex::Regex;
use std::sync::OnceLock;

const UNIT_TEXTS: &[&str] = &[
    "east",
    "degree",
    "mph",
    "kmph",
    "ft",
    "m sqaure",
    " m east",
    "sq m",
    "deg",
    "mile",
    "q .",
    "monkey",
    "prime",
    "ratio",
    "profit of rs",
    "rd",
    "o",
    "gm",
    "p . m",
    "lb",
    "tile",
    "per",
    "dm",
    "lt",
    "gain",
    "ab",
    "way",
    "west",
    "a .",
    "b .",
    "c .",
    "d .",
    "e .",
    "f .",
    "g .",
    "h .",
    "t",
    "a",
    "h",
    "no change",
    "men",
    "soldier",
    "pie",
    "bc",
    "excess",
    "st",
    "inches",
    "noon",
    "percent",
    "by",
    "gal",
    "kmh",
    "c",
    "acre",
    "rise",
    "a . m",
    "th",
    "π r 2",
    "sq",
    "mark",
    "l",
    "toy",
    "coin",
    "sq . m",
    "gallon",
    "° f",
    "profit",
    "minw",
    "yr",
    "women",
    "feet",
    "am",
    "pm",
    "hr",
    "cu cm",
    "square",
    "v â € ™",
    "are",
    "rupee",
    "rounds",
    "cubic",
    "cc",
    "mtr",
    "s",
    "ohm",
    "number",
    "kmph",
    "day",
    "hour",
    "minute",
    "min",
    "second",
    "man",
    "woman",
    "sec",
    "cube",
    "mt",
    "sq inch",
    "mp",
    "∏ cm ³",
    "hectare",
    "more",
    "sec",
    "unit",
    "cu . m",
    "cm 2",
    "rs .",
    "rs",
    "kg",
    "g",
    "month",
    "km",
    "m",
    "cm",
    "mm",
    "apple",
    "liter",
    "loss",
    "yard",
    "pure",
    "year",
    "increase",
    "decrease",
    "d",
    "less",
    "Surface",
    "litre",
    "pi sq m",
    "s .",
    "metre",
    "meter",
    "inch",
];

/// The compiled patterns `(^|\W)UNIT($|\W)`, in the reference order (list, then list+"s").
fn patterns() -> &'static [Regex] {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let base: Vec<&str> = UNIT_TEXTS.to_vec();
        let with_s = base.iter().map(|u| format!("{u}s"));
        base.iter()
            .map(|u| u.to_string())
            .chain(with_s)
            .filter_map(|u| Regex::new(&format!(r"(^|\W){u}($|\W)")).ok())
            .collect()
    })
}

/// The unit-removal loop of `strip_string` (skipped there for `carp_en`/`minerva_math`).
pub fn remove_units(s: &str) -> String {
    let mut string = s.to_string();
    for _ in 0..2 {
        for re in patterns() {
            let replaced = re.replace_all(&string, "${1}${2}");
            if !replaced.is_empty() {
                string = replaced.into_owned();
            }
        }
    }
    string
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_units_compile() {
        assert_eq!(patterns().len(), 2 * 132);
    }

    #[test]
    fn removes_lone_unit_words() {
        assert_eq!(remove_units("60 mph"), "60 ");
        assert_eq!(remove_units("\\pm 2"), "\\ 2");
        assert_eq!(remove_units("12 apples"), "12 ");
        assert_eq!(remove_units("a = 2, b = 3"), " 2,  3");
        assert_eq!(remove_units("\\pm2"), "\\pm2");
        assert_eq!(remove_units("m"), "m");
    }
}

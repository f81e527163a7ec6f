//! `word2number.w2n.word_to_num` (word2number 1.1), which `parser.py`'s
//! `convert_word_number` applies to the whole answer inside `strip_string`: any string
//! holding an English number word as a whitespace-separated token is replaced by the number
//! ("twenty-one" -> "21", but also "one solution" -> "1"); any failure leaves the text as is.

use super::pyfloat::py_float_repr;

#[derive(Clone, Copy)]
enum Word {
    Num(i128),
    Point,
}

fn lookup(w: &str) -> Option<Word> {
    const SMALL: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 8] = [
        "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    if let Some(i) = SMALL.iter().position(|s| *s == w) {
        return Some(Word::Num(i as i128));
    }
    if let Some(i) = TENS.iter().position(|s| *s == w) {
        return Some(Word::Num(20 + 10 * i as i128));
    }
    match w {
        "hundred" => Some(Word::Num(100)),
        "thousand" => Some(Word::Num(1_000)),
        "million" => Some(Word::Num(1_000_000)),
        "billion" => Some(Word::Num(1_000_000_000)),
        "point" => Some(Word::Point),
        _ => None,
    }
}

fn value(w: &str) -> Option<i128> {
    match lookup(w)? {
        Word::Num(n) => Some(n),
        // Python would add a str to an int here and raise.
        Word::Point => None,
    }
}

/// `number_formation`; `None` where Python raises (empty list, `point`).
fn number_formation(words: &[&str]) -> Option<i128> {
    let n: Vec<i128> = words.iter().map(|w| value(w)).collect::<Option<_>>()?;
    match n.len() {
        4 => Some(n[0] * n[1] + n[2] + n[3]),
        3 => Some(n[0] * n[1] + n[2]),
        2 if n.contains(&100) => Some(n[0] * n[1]),
        2 => Some(n[0] + n[1]),
        _ => n.first().copied(),
    }
}

fn decimal_sum(words: &[&str]) -> Option<f64> {
    let mut digits = String::new();
    for w in words {
        match value(w) {
            Some(d) if (0..=9).contains(&d) && *w != "ten" => digits.push_str(&d.to_string()),
            _ => return None,
        }
    }
    format!("0.{digits}").parse().ok()
}

fn word_to_num(sentence: &str) -> Option<String> {
    let s = sentence.replace('-', " ").to_lowercase();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        let t = s.trim_start_matches('0');
        return Some(if t.is_empty() { "0".into() } else { t.into() });
    }
    let mut clean: Vec<&str> = s
        .split_whitespace()
        .filter(|w| lookup(w).is_some())
        .collect();
    if clean.is_empty() {
        return None;
    }
    for key in ["thousand", "million", "billion", "point"] {
        if clean.iter().filter(|w| **w == key).count() > 1 {
            return None;
        }
    }
    let mut decimals: Vec<&str> = Vec::new();
    if let Some(p) = clean.iter().position(|w| *w == "point") {
        decimals = clean[p + 1..].to_vec();
        clean.truncate(p);
    }
    let idx = |k: &str| clean.iter().position(|w| *w == k).map_or(-1, |i| i as i64);
    let (bi, mi, ti) = (idx("billion"), idx("million"), idx("thousand"));
    if (ti > -1 && (ti < mi || ti < bi)) || (mi > -1 && mi < bi) {
        return None;
    }
    let sl = |a: i64, b: i64| -> &[&str] { &clean[a as usize..b as usize] };
    let len = clean.len() as i64;
    let mut total: i128 = 0;
    if clean.len() == 1 {
        total += value(clean[0])?;
    } else if !clean.is_empty() {
        if bi > -1 {
            total += number_formation(sl(0, bi))? * 1_000_000_000;
        }
        if mi > -1 {
            let m = if bi > -1 { sl(bi + 1, mi) } else { sl(0, mi) };
            total += number_formation(m)? * 1_000_000;
        }
        if ti > -1 {
            let t = if mi > -1 {
                sl(mi + 1, ti)
            } else if bi > -1 {
                sl(bi + 1, ti)
            } else {
                sl(0, ti)
            };
            total += number_formation(t)? * 1_000;
        }
        let hundreds = if ti > -1 && ti != len - 1 {
            number_formation(sl(ti + 1, len))?
        } else if mi > -1 && mi != len - 1 {
            number_formation(sl(mi + 1, len))?
        } else if bi > -1 && bi != len - 1 {
            number_formation(sl(bi + 1, len))?
        } else if ti == -1 && mi == -1 && bi == -1 {
            number_formation(&clean)?
        } else {
            0
        };
        total += hundreds;
    }
    if !decimals.is_empty() {
        // get_decimal_sum returns the int 0 for a non-digit word: the sum stays an int.
        if let Some(d) = decimal_sum(&decimals) {
            return Some(py_float_repr(total as f64 + d));
        }
    }
    Some(total.to_string())
}

/// `convert_word_number`: the number the text spells, or the text unchanged.
pub fn convert_word_number(text: &str) -> String {
    word_to_num(text).unwrap_or_else(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::convert_word_number as c;

    #[test]
    fn spelled_numbers() {
        assert_eq!(c("five"), "5");
        assert_eq!(c("twenty-one"), "21");
        assert_eq!(c("two hundred thousand and five"), "200005");
        assert_eq!(c("one solution"), "1");
        assert_eq!(c("two point five"), "2.5");
        assert_eq!(c("007"), "7");
    }

    #[test]
    fn failures_leave_text() {
        assert_eq!(c("Evelyn"), "Evelyn");
        assert_eq!(c("\\frac{1}{2}"), "\\frac{1}{2}");
        assert_eq!(c("thousand thousand"), "thousand thousand");
        assert_eq!(c(""), "");
    }
}

//! The GGUF header's `general.alignment`, read before candle parses the file: candle's
//! reader divides by it, so a file that declares 0 would panic inside candle (and print
//! the panic) instead of being refused with an error.
//!
//! Owns: a walk over the metadata entries (GGUF v1-v3) that skips every value it does not
//! need. Anything it cannot follow (a bad magic, an unknown type, a length past the end
//! of the file) it leaves to candle, whose errors name it.
//! Must not know: tensors, configs, the rest of the format.

use std::io::{Read, Seek, SeekFrom};

/// Nested arrays deeper than this are left to candle (which has its own limit).
const MAX_DEPTH: usize = 8;

/// The metadata key candle takes the alignment from.
const KEY: &[u8; 17] = b"general.alignment";

/// Bytes of a value of GGUF type `ty` when that is fixed (numbers and bools).
fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        // u8, i8, bool
        0 | 1 | 7 => Some(1),
        // u16, i16
        2 | 3 => Some(2),
        // u32, i32, f32
        4..=6 => Some(4),
        // u64, i64, f64
        10..=12 => Some(8),
        _ => None,
    }
}

/// Whether the header's last `general.alignment` entry (the one candle keeps) is an integer
/// 0. Reads from the reader's start; leaves its position anywhere.
pub(super) fn declares_zero_alignment<R: Read + Seek>(reader: &mut R) -> bool {
    walk(reader).unwrap_or(None) == Some(0)
}

/// The last `general.alignment` of an integer type candle reads it as, if any; `None`
/// from `Err` (or from `Ok(None)`) both mean "nothing to refuse here".
fn walk<R: Read + Seek>(r: &mut R) -> std::io::Result<Option<u64>> {
    let len = r.seek(SeekFrom::End(0))?;
    r.seek(SeekFrom::Start(0))?;
    if &take::<4, _>(r)? != b"GGUF" {
        return Ok(None);
    }
    let version = u32::from_le_bytes(take(r)?);
    let wide = match version {
        1 => false,
        2 | 3 => true,
        _ => return Ok(None),
    };
    let mut h = Header { r, len, wide };
    let _tensors = h.count()?;
    let entries = h.count()?;
    let mut alignment = None;
    for _ in 0..entries {
        let key_len = h.count()?;
        let is_alignment = if key_len == KEY.len() as u64 {
            let mut key = [0u8; KEY.len()];
            h.r.read_exact(&mut key)?;
            &key == KEY
        } else {
            h.skip(key_len)?;
            false
        };
        let ty = u32::from_le_bytes(take(h.r)?);
        if is_alignment {
            // candle's rule: unsigned integers, and signed ones that are not negative;
            // any other type means the default alignment.
            alignment = match ty {
                0 => Some(u64::from(take::<1, _>(h.r)?[0])),
                1 => Some(i8::from_le_bytes(take(h.r)?) as u64),
                2 => Some(u64::from(u16::from_le_bytes(take(h.r)?))),
                3 => Some(i16::from_le_bytes(take(h.r)?) as u64),
                4 => Some(u64::from(u32::from_le_bytes(take(h.r)?))),
                5 => Some(i32::from_le_bytes(take(h.r)?) as u64),
                _ => {
                    h.value(ty, 0)?;
                    None
                }
            };
        } else {
            h.value(ty, 0)?;
        }
    }
    Ok(alignment)
}

/// The reader with what the walk needs to know: the file's length (nothing is skipped
/// past it) and whether counts are 64-bit (v2, v3) or 32-bit (v1).
struct Header<'a, R> {
    r: &'a mut R,
    len: u64,
    wide: bool,
}

impl<R: Read + Seek> Header<'_, R> {
    /// A length or count field.
    fn count(&mut self) -> std::io::Result<u64> {
        Ok(if self.wide {
            u64::from_le_bytes(take(self.r)?)
        } else {
            u64::from(u32::from_le_bytes(take(self.r)?))
        })
    }

    /// Moves `n` bytes on, refusing to pass the end of the file. Read through rather than
    /// sought: a buffered reader drops its buffer at every seek, and a vocabulary holds
    /// tens of thousands of short strings.
    fn skip(&mut self, n: u64) -> std::io::Result<()> {
        let at = self.r.stream_position()?;
        if at.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let skipped = std::io::copy(&mut self.r.by_ref().take(n), &mut std::io::sink())?;
        if skipped == n {
            Ok(())
        } else {
            Err(std::io::ErrorKind::UnexpectedEof.into())
        }
    }

    /// Skips one value of GGUF type `ty`.
    fn value(&mut self, ty: u32, depth: usize) -> std::io::Result<()> {
        if let Some(size) = fixed_size(ty) {
            return self.skip(size);
        }
        match ty {
            // string
            8 => {
                let n = self.count()?;
                self.skip(n)
            }
            // array: element type, count, elements
            9 if depth < MAX_DEPTH => {
                let elem = u32::from_le_bytes(take(self.r)?);
                let n = self.count()?;
                match fixed_size(elem) {
                    Some(size) => self.skip(n.saturating_mul(size)),
                    None => {
                        // Each element takes at least a byte: a count past the file's
                        // end is refused before the loop.
                        if n > self.len {
                            return Err(std::io::ErrorKind::UnexpectedEof.into());
                        }
                        (0..n).try_for_each(|_| self.value(elem, depth + 1))
                    }
                }
            }
            _ => Err(std::io::ErrorKind::InvalidData.into()),
        }
    }
}

/// The next `N` bytes.
fn take<const N: usize, R: Read>(r: &mut R) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A v3 header with the given metadata entries (key, type, value bytes) and no tensors.
    fn header(entries: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.extend((entries.len() as u64).to_le_bytes());
        for (key, ty, value) in entries {
            b.extend((key.len() as u64).to_le_bytes());
            b.extend(key.as_bytes());
            b.extend(ty.to_le_bytes());
            b.extend(value);
        }
        b
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u64).to_le_bytes().to_vec();
        b.extend(s.as_bytes());
        b
    }

    fn zero(bytes: Vec<u8>) -> bool {
        declares_zero_alignment(&mut Cursor::new(bytes))
    }

    #[test]
    fn zero_of_every_integer_type_is_found() {
        for (ty, width) in [(0u32, 1usize), (1, 1), (2, 2), (3, 2), (4, 4), (5, 4)] {
            assert!(
                zero(header(&[("general.alignment", ty, vec![0; width])])),
                "type {ty}"
            );
            let mut one = vec![0; width];
            one[0] = 1;
            assert!(
                !zero(header(&[("general.alignment", ty, one)])),
                "type {ty}"
            );
        }
    }

    /// Found after entries of every kind (strings, arrays of numbers, of strings, nested),
    /// and the last entry wins, as in candle's map.
    #[test]
    fn entries_before_are_skipped_and_the_last_wins() {
        let mut strings = 8u32.to_le_bytes().to_vec();
        strings.extend(2u64.to_le_bytes());
        strings.extend(string("a"));
        strings.extend(string("bcd"));
        let mut numbers = 4u32.to_le_bytes().to_vec();
        numbers.extend(3u64.to_le_bytes());
        numbers.extend([7u8; 12]);
        let mut nested = 9u32.to_le_bytes().to_vec();
        nested.extend(1u64.to_le_bytes());
        nested.extend(numbers.clone());
        let before = [
            ("general.name", 8u32, string("model")),
            ("tokenizer.ggml.tokens", 9, strings),
            ("scores", 9, numbers),
            ("nested", 9, nested),
            ("flag", 7, vec![1]),
            ("general.alignmenX", 4, vec![0; 4]),
        ];
        let mut entries = before.to_vec();
        entries.push(("general.alignment", 4, vec![0; 4]));
        assert!(zero(header(&entries)));
        entries.push(("general.alignment", 4, 32u32.to_le_bytes().to_vec()));
        assert!(!zero(header(&entries)));
        entries.push(("general.alignment", 0, vec![0]));
        assert!(zero(header(&entries)));
    }

    /// What the walk cannot follow is left to candle: no verdict of zero.
    #[test]
    fn malformed_headers_are_left_to_candle() {
        assert!(!zero(b"GGUX".to_vec()));
        assert!(!zero(Vec::new()));
        let mut cut = header(&[("general.alignment", 4, vec![0; 4])]);
        cut.truncate(cut.len() - 2);
        assert!(!zero(cut));
        // A string longer than the file, then the zero.
        let mut long = (1u64 << 40).to_le_bytes().to_vec();
        long.extend(b"x");
        assert!(!zero(header(&[
            ("name", 8, long),
            ("general.alignment", 4, vec![0; 4]),
        ])));
        // Negative signed values: candle takes the default.
        assert!(!zero(header(&[(
            "general.alignment",
            5,
            (-1i32).to_le_bytes().to_vec()
        )])));
    }
}

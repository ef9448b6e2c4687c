//! Every callable a PyTorch checkpoint's pickle names, read from its opcodes: `GLOBAL`, `INST`,
//! `STACK_GLOBAL` and the extension codes. The tree `pytorch-reader` builds shows a callable only
//! where it stays uninterpreted; one passed as an argument to a call it interprets (a tensor
//! rebuild's hooks or metadata, a parameter's state) is consumed there and leaves no trace. This
//! scan sees them all: a pickle is refused when any callable outside plain data appears anywhere.

use anyhow::{Context as _, Result};
use std::path::Path;

/// The calls PyTorch's own `torch.save` writes to rebuild tensors and parameters (those
/// `torch.load(weights_only=True)` allows), besides the data types the caller accepts.
const REBUILDS: &[&str] = &[
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch._tensor._rebuild_from_type_v2",
    "torch.serialization._get_layout",
    "_codecs.encode",
    "builtins.bytearray",
    "__builtin__.bytearray",
];

/// The pickles of a checkpoint file: `data.pkl` of a zip, or the leading pickles of the legacy
/// format (magic number, protocol, system info, the object, the storage keys).
fn pickles(path: &Path, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
    if !bytes.starts_with(b"PK\x03\x04") {
        return Ok(vec![bytes.to_vec()]);
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .with_context(|| format!("{}: not a readable zip", path.display()))?;
    let mut out = vec![];
    for i in 0..zip.len() {
        let mut f = zip
            .by_index(i)
            .with_context(|| format!("{}: a damaged zip entry", path.display()))?;
        let name = f
            .name()
            .map(|n| n.into_owned())
            .map_err(|e| anyhow::anyhow!("{}: a zip entry whose name cannot be read ({e})", path.display()))?;
        if name.ends_with(".pkl") {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, 100 << 20), &mut b)
                .with_context(|| format!("{}: cannot read {name}", path.display()))?;
            out.push(b);
        }
    }
    Ok(out)
}

/// Refuses `path` when a callable its pickle names is not one of `allowed` or a tensor rebuild.
pub fn refuse_hidden_code(path: &Path, allowed: impl Fn(&str) -> bool) -> Result<()> {
    let bytes = crate::read::bytes(path, crate::read::Follow::Links, crate::read::ANY)?;
    let zip = bytes.starts_with(b"PK\x03\x04");
    for p in pickles(path, &bytes)? {
        let mut at = 0;
        // The legacy format is five pickles in a row, then raw storage bytes.
        for _ in 0..if zip { 1 } else { 5 } {
            if at >= p.len() {
                break;
            }
            let (names, end) = globals(&p[at..]).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            for n in names {
                if !allowed(&n) && !REBUILDS.contains(&n.as_str()) {
                    return Err(crate::input_error(format!(
                        "{}: the pickle calls `{n}` (inside data the reader would otherwise have consumed): \
                         loading it in PyTorch would run that code. rdml runs no code from a checkpoint and \
                         reads only tensor records; if the file is yours, save `model.state_dict()` (or a \
                         safetensors file) instead",
                        path.display()
                    )));
                }
            }
            at += end;
        }
    }
    Ok(())
}

/// A value pushed by the opcode just before, as far as this scan follows it: a string, or not.
type Seen = Option<String>;

struct Ops<'a> {
    p: &'a [u8],
    i: usize,
}

impl<'a> Ops<'a> {
    fn take(&mut self, n: u64) -> std::result::Result<&'a [u8], String> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.i.checked_add(n))
            .ok_or("a length past the file")?;
        let s = self.p.get(self.i..end).ok_or("truncated")?;
        self.i = end;
        Ok(s)
    }

    /// A little-endian unsigned integer of `n` bytes.
    fn uint(&mut self, n: u64) -> std::result::Result<u64, String> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x)))
    }

    /// `n` bytes of length, then that many bytes.
    fn counted(&mut self, n: u64) -> std::result::Result<&'a [u8], String> {
        let len = self.uint(n)?;
        self.take(len)
    }

    fn line(&mut self) -> std::result::Result<String, String> {
        let rest = self.p.get(self.i..).ok_or("truncated")?;
        let n = rest.iter().position(|&b| b == b'\n').ok_or("an unterminated line")?;
        self.i += n + 1;
        Ok(String::from_utf8_lossy(&rest[..n]).into_owned())
    }
}

/// What an opcode does to the scan's window of values just pushed.
enum Effect {
    /// Pushes one value (a string this scan can follow, or another).
    Push(Seen),
    /// Stores the value on top in the memo under this index (`None`: the next free one).
    Memo(Option<u64>),
    /// Touches neither stack nor memo (`PROTO`, `FRAME`).
    Nothing,
    /// Anything else: the window no longer tells what is on top.
    Other,
}

/// The callables one pickle names, and the offset just past its `STOP`. A `STACK_GLOBAL` is
/// followed only when its module and name were pushed by the two opcodes just before it (as
/// Python writes them); any other is refused, never guessed.
fn globals(p: &[u8]) -> std::result::Result<(Vec<String>, usize), String> {
    let mut o = Ops { p, i: 0 };
    let (mut names, mut window, mut memo) = (vec![], Vec::<Seen>::new(), std::collections::HashMap::new());
    loop {
        let op = *p.get(o.i).ok_or("no STOP: truncated")?;
        o.i += 1;
        let text = |b: &[u8]| Some(String::from_utf8_lossy(b).into_owned());
        let effect = match op {
            b'.' => return Ok((names, o.i)),
            b'c' | b'i' => {
                names.push(format!("{}.{}", o.line()?, o.line()?));
                if op == b'c' { Effect::Push(None) } else { Effect::Other }
            }
            0x93 => match window.as_slice() {
                [.., Some(m), Some(n)] => {
                    names.push(format!("{m}.{n}"));
                    Effect::Other
                }
                _ => return Err("a STACK_GLOBAL whose module and name this reader cannot follow".into()),
            },
            0x82..=0x84 => return Err("a callable from the extension registry (EXT1/2/4)".into()),
            b'X' | b'T' | b'B' => Effect::Push(text(o.counted(4)?)),
            0x8c | b'U' | b'C' => Effect::Push(text(o.counted(1)?)),
            0x8d | 0x8e | 0x96 => Effect::Push(text(o.counted(8)?)),
            b'V' | b'S' => Effect::Push(Some(o.line()?.trim_matches(['\'', '"']).to_string())),
            b'I' | b'L' | b'F' | b'P' => {
                o.line()?;
                Effect::Push(None)
            }
            b'J' => o.take(4).map(|_| Effect::Push(None))?,
            b'K' => o.take(1).map(|_| Effect::Push(None))?,
            b'M' => o.take(2).map(|_| Effect::Push(None))?,
            b'G' => o.take(8).map(|_| Effect::Push(None))?,
            0x8a => o.counted(1).map(|_| Effect::Push(None))?,
            0x8b => o.counted(4).map(|_| Effect::Push(None))?,
            b'g' => Effect::Push(
                memo.get(&o.line()?.trim().parse::<u64>().map_err(|_| "a bad GET")?)
                    .cloned()
                    .flatten(),
            ),
            b'h' => Effect::Push(memo.get(&o.uint(1)?).cloned().flatten()),
            b'j' => Effect::Push(memo.get(&o.uint(4)?).cloned().flatten()),
            b'p' => Effect::Memo(Some(o.line()?.trim().parse::<u64>().map_err(|_| "a bad PUT")?)),
            b'q' => Effect::Memo(Some(o.uint(1)?)),
            b'r' => Effect::Memo(Some(o.uint(4)?)),
            0x94 => Effect::Memo(None),
            0x80 => o.take(1).map(|_| Effect::Nothing)?,
            0x95 => o.take(8).map(|_| Effect::Nothing)?,
            b'N' | b')' | b']' | b'}' | 0x88 | 0x89 | 0x8f => Effect::Push(None),
            b'('
            | b'0'
            | b'2'
            | b'1'
            | b'a'
            | b'e'
            | b'l'
            | b't'
            | b'd'
            | b's'
            | b'u'
            | b'b'
            | b'R'
            | b'o'
            | 0x81
            | 0x92
            | 0x85..=0x87
            | 0x90
            | 0x91
            | 0x97
            | 0x98
            | b'Q' => Effect::Other,
            _ => return Err(format!("an unknown pickle opcode 0x{op:02x} at byte {}", o.i - 1)),
        };
        match effect {
            Effect::Push(v) => window.push(v),
            Effect::Memo(at) => {
                let at = at.unwrap_or(memo.len() as u64);
                memo.insert(at, window.last().cloned().flatten());
            }
            Effect::Nothing => {}
            Effect::Other => window.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protocol-2 pickle `{'w': os.system('x')}` hidden where a tensor rebuild would consume it
    /// is found; `collections.OrderedDict` and a rebuild are not callables to refuse.
    #[test]
    fn every_global_is_seen() {
        let mut p = b"\x80\x02}q\x00X\x01\x00\x00\x00wq\x01".to_vec();
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x02(cos\nsystem\nX\x01\x00\x00\x00x\x85Rtq\x03Rs.");
        let (names, end) = globals(&p).unwrap();
        assert_eq!(names, ["torch._utils._rebuild_tensor_v2", "os.system"]);
        assert_eq!(end, p.len());
        // Protocol 4: module and name pushed, memoised, then STACK_GLOBAL.
        let p4 = b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94.";
        assert_eq!(globals(p4).unwrap().0, ["collections.OrderedDict"]);
        // The same names fetched back from the memo.
        let again = b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x930h\x00h\x01\x93.";
        assert_eq!(globals(again).unwrap().0, ["os.system", "os.system"]);
        // A STACK_GLOBAL whose strings were moved under others is not guessed.
        let hidden = b"\x80\x04\x8c\x02os\x8c\x06system\x8c\x01a\x8c\x01b00\x93.";
        assert!(globals(hidden).unwrap_err().contains("cannot follow"));
        assert!(globals(b"\x80\x02}").unwrap_err().contains("truncated"));
    }
}

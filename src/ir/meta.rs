//! A node's `metadata_props`, held as shared strings. A rewrite stamps every node it makes
//! with its rule and origin (and a CPU pin with its annotation): thousands of nodes hold the
//! same few keys and values. Each entry holds a program constant or a counted string, never a
//! copy of its own (an entry is two words of references instead of two strings with a
//! buffer each). Encoded, an entry is the bytes of its `StringStringEntryProto`.

use std::sync::Arc;

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};

use super::SharedList;
use crate::proto::StringStringEntryProto;

/// A string many nodes may hold: a constant of the program, or a counted copy.
#[derive(Clone)]
pub enum Text {
    Static(&'static str),
    Shared(Arc<str>),
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Text::Static(s) => s,
            Text::Shared(s) => s,
        }
    }
}

impl From<&'static str> for Text {
    fn from(s: &'static str) -> Text {
        Text::Static(s)
    }
}

impl From<Arc<str>> for Text {
    fn from(s: Arc<str>) -> Text {
        Text::Shared(s)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text::Shared(s.into())
    }
}

impl Text {
    /// A counted copy of `s`.
    pub fn copy(s: &str) -> Text {
        Text::Shared(s.into())
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// A node's `metadata_props`: a list the nodes one rewrite makes share (see
/// [`SharedList`]), changed with [`SharedList::set`].
pub type MetaList = SharedList<MetaEntry>;

impl SharedList<MetaEntry> {
    /// Set the value of the first entry of `key`, or add an entry at the end (a list another
    /// node shares is copied first; the new list is allocated at its length).
    pub fn set(&mut self, key: Text, value: Text) {
        match self.iter().position(|e| e.key() == Some(&*key)) {
            Some(i) => self.make_mut()[i].value = Some(value),
            None => self.push(MetaEntry {
                key: Some(key),
                value: Some(value),
            }),
        }
    }
}

/// One `metadata_props` entry of a node (either field may be absent, as in the message).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetaEntry {
    pub key: Option<Text>,
    pub value: Option<Text>,
}

impl From<StringStringEntryProto> for MetaEntry {
    fn from(e: StringStringEntryProto) -> MetaEntry {
        MetaEntry {
            key: e.key.map(Text::from),
            value: e.value.map(Text::from),
        }
    }
}

impl MetaEntry {
    /// An entry of this key and value.
    pub fn new(key: impl Into<Text>, value: impl Into<Text>) -> MetaEntry {
        MetaEntry {
            key: Some(key.into()),
            value: Some(value.into()),
        }
    }
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }
    /// The message of this entry.
    pub fn to_proto(&self) -> StringStringEntryProto {
        StringStringEntryProto {
            key: self.key().map(str::to_string),
            value: self.value().map(str::to_string),
        }
    }
    /// The length of the entry's message (without its own key and length).
    pub fn encoded_len(&self) -> usize {
        let field = |tag: u32, s: Option<&str>| {
            s.map_or(0, |s| {
                key_len(tag) + encoded_len_varint(s.len() as u64) + s.len()
            })
        };
        field(1, self.key()) + field(2, self.value())
    }
    /// Append the entry as field `tag` of its parent: the bytes prost writes for
    /// [`MetaEntry::to_proto`]'s message.
    pub fn encode(&self, tag: u32, buf: &mut Vec<u8>) {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(self.encoded_len() as u64, buf);
        for (field, s) in [(1, self.key()), (2, self.value())] {
            if let Some(s) = s {
                encode_key(field, WireType::LengthDelimited, buf);
                encode_varint(s.len() as u64, buf);
                buf.extend_from_slice(s.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// An entry encodes to its message's bytes, absent fields and empty strings included.
    #[test]
    fn an_entry_encodes_as_its_message() {
        let cases = [
            MetaEntry::new("onnx_safeify.rule", Text::copy("split-depthwise")),
            MetaEntry::default(),
            MetaEntry {
                key: Some(Text::copy("")),
                value: None,
            },
            MetaEntry {
                key: None,
                value: Some(Text::from("x".repeat(300))),
            },
        ];
        for e in cases {
            let mut buf = Vec::new();
            e.encode(9, &mut buf);
            let mut want = Vec::new();
            prost::encoding::message::encode(9, &e.to_proto(), &mut want);
            assert_eq!(buf, want, "{e:?}");
            assert_eq!(e.encoded_len(), e.to_proto().encoded_len());
            assert_eq!(MetaEntry::from(e.to_proto()), e);
        }
    }

    /// Entries are set in place or added at the end; a list another node holds is copied
    /// first, and stays as it was.
    #[test]
    fn a_list_is_set_in_place_or_extended() {
        let mut a = MetaList::default();
        assert!(a.is_empty());
        a.set("k".into(), Text::copy("1"));
        a.set("j".into(), Text::copy("2"));
        let b = a.clone();
        assert!(a.same_list(&b));
        a.set("k".into(), Text::copy("3"));
        assert!(!a.same_list(&b));
        let pairs = |l: &MetaList| -> Vec<(String, String)> {
            l.iter()
                .map(|e| (e.key().unwrap().to_string(), e.value().unwrap().to_string()))
                .collect()
        };
        let owned = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(pairs(&a), owned(&[("k", "3"), ("j", "2")]));
        assert_eq!(pairs(&b), owned(&[("k", "1"), ("j", "2")]));
        a.set("i".into(), Text::copy("4"));
        assert_eq!(pairs(&a), owned(&[("k", "3"), ("j", "2"), ("i", "4")]));
        assert_eq!(std::mem::size_of::<MetaList>(), 16);
    }

    /// No larger than the message's two optional strings, and no buffer of its own.
    #[test]
    fn an_entry_is_small() {
        assert_eq!(std::mem::size_of::<MetaEntry>(), 48);
        assert_eq!(std::mem::size_of::<Option<Text>>(), 24);
    }
}

//! `POST /v1/embeddings`: deterministic vectors, billed and recorded like a
//! chat call, under the same scenarios (the one step in `decide.rs`; the
//! quota costs the input tokens only, there is no output).
//!
//! The request is read as OpenAI reads it: no `model`, an empty or
//! malformed `input` (a text, texts, token ids or arrays of them), more
//! than 2048 inputs, `dimensions` < 1, an `encoding_format` other than
//! `float` / `base64` → 400 `invalid_request_error`; a text input containing
//! [`BAD_REQUEST_MARKER`] → 400. Its input tokens are the tokens of each
//! text with the model's encoding, or the number of token ids.
//!
//! The vector of an input ([`embedding_vector`]) is a pure function of the
//! model, the input (its text, or its token ids) and the length: seeded by
//! the 64-bit FNV-1a hash of those, drawn with SplitMix64 (both fixed
//! algorithms, so vectors never change between runs or versions), scaled
//! to unit length. The length is the request's `dimensions`, else
//! [`default_dimensions`] of the model. `encoding_format: "base64"` answers
//! each vector as base64 of its little-endian `f32`s, like OpenAI.

use base64::Engine as _;

use bytes::Bytes;

use super::{Call, Endpoint, Output, Reply, Route};
use crate::dialect::Dialect;
use crate::record::BAD_REQUEST_MARKER;
use crate::tokens::count_text;
use crate::wire::json_bytes;
use crate::wire::openai::{
    read_request, EmbeddingData, EmbeddingList, EmbeddingUsage, EmbeddingsInput, EmbeddingsRequest, Vector,
};

/// The most inputs one request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// One input of an embeddings request: a text, or token ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputItem<'a> {
    /// A text.
    Text(&'a str),
    /// Token ids.
    Tokens(&'a [u32]),
}

/// The vector length of `model` when the request gives no `dimensions`:
/// 3072 for a model whose name holds `large` (like
/// `text-embedding-3-large`), else 1536 (`text-embedding-3-small`).
pub fn default_dimensions(model: &str) -> u32 {
    if model.contains("large") {
        3072
    } else {
        1536
    }
}

/// 64-bit FNV-1a.
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(seed, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The next SplitMix64 output.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The mock's vector of one input: deterministic, of length `dims`, unit
/// length (see the module docs).
pub fn embedding_vector(model: &str, item: InputItem<'_>, dims: u32) -> Vec<f32> {
    let mut h = fnv1a(0xcbf2_9ce4_8422_2325, model.as_bytes());
    h = fnv1a(h, &dims.to_le_bytes());
    h = match item {
        InputItem::Text(t) => fnv1a(fnv1a(h, b"t"), t.as_bytes()),
        InputItem::Tokens(ids) => ids
            .iter()
            .fold(fnv1a(h, b"i"), |h, id| fnv1a(h, &id.to_le_bytes())),
    };
    let mut state = h;
    let raw: Vec<f64> = (0..dims)
        .map(|_| {
            // 53 random bits as a float in [-1, 1).
            #[allow(clippy::cast_precision_loss)]
            let unit = (splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
            unit * 2.0 - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    #[allow(clippy::cast_possible_truncation)]
    raw.iter()
        .map(|x| if norm > 0.0 { (x / norm) as f32 } else { 0.0 })
        .collect()
}

/// The `embedding` field: floats, or base64 of little-endian `f32`s.
fn encode(vector: Vec<f32>, base64: bool) -> Vector {
    if base64 {
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        Vector::Floats(vector)
    }
}

/// The inputs of `input`, one per vector.
fn items(input: &EmbeddingsInput) -> Vec<InputItem<'_>> {
    match input {
        EmbeddingsInput::Text(t) => vec![InputItem::Text(t)],
        EmbeddingsInput::Texts(ts) => ts.iter().map(|t| InputItem::Text(t)).collect(),
        EmbeddingsInput::Tokens(ids) => vec![InputItem::Tokens(ids)],
        EmbeddingsInput::TokenArrays(arrays) => arrays.iter().map(|a| InputItem::Tokens(a)).collect(),
    }
}

/// The request, or the message of a 400 (worded like OpenAI's).
fn parse(body: &[u8]) -> Result<EmbeddingsRequest, String> {
    let req = read_request(body, |r: &EmbeddingsRequest| &r.model)?;
    let inputs = items(&req.input);
    if inputs.is_empty() {
        return Err("'input' must not be an empty array".into());
    }
    if inputs.len() > MAX_INPUTS {
        return Err(format!(
            "'input' has {} items; at most {MAX_INPUTS} are allowed",
            inputs.len()
        ));
    }
    let single = matches!(req.input, EmbeddingsInput::Text(_) | EmbeddingsInput::Tokens(_));
    let empty = inputs.iter().position(|i| match i {
        InputItem::Text(t) => t.is_empty(),
        InputItem::Tokens(ids) => ids.is_empty(),
    });
    if let Some(i) = empty {
        let which = if single {
            "'input'".to_owned()
        } else {
            format!("'input[{i}]'")
        };
        return Err(format!("{which} must not be empty"));
    }
    if let Some(f) = req
        .encoding_format
        .as_deref()
        .filter(|f| !matches!(*f, "float" | "base64"))
    {
        return Err(format!(
            "'encoding_format' must be \"float\" or \"base64\", not {f:?}"
        ));
    }
    if req.dimensions == Some(0) {
        return Err("'dimensions' must be at least 1".into());
    }
    Ok(req)
}

/// The embeddings endpoint.
#[derive(Debug)]
pub(crate) struct Embeddings;

impl Endpoint for Embeddings {
    const ROUTE: Route = Route::new("/v1/embeddings", Dialect::OpenAi);
    type Request = EmbeddingsRequest;

    fn read(body: &[u8]) -> Result<Call<EmbeddingsRequest>, String> {
        let req = parse(body)?;
        let inputs = items(&req.input);
        let marked = inputs
            .iter()
            .any(|i| matches!(i, InputItem::Text(t) if t.contains(BAD_REQUEST_MARKER)));
        let input = inputs
            .iter()
            .map(|i| match i {
                InputItem::Text(t) => count_text(&req.model, t),
                InputItem::Tokens(ids) => u64::try_from(ids.len()).unwrap_or(u64::MAX),
            })
            .sum();
        Ok(Call {
            model: req.model.clone(),
            stream: false,
            marked,
            input,
            max_output: Some(0),
            turns: None,
            fixed_output: None,
            cache: None,
            request: req,
        })
    }

    fn answer(call: &Call<EmbeddingsRequest>, out: &Output) -> Reply {
        let req = &call.request;
        let dims = req.dimensions.unwrap_or_else(|| default_dimensions(&req.model));
        let base64 = req.encoding_format.as_deref() == Some("base64");
        let data = items(&req.input)
            .into_iter()
            .enumerate()
            .map(|(index, item)| EmbeddingData {
                object: "embedding",
                index,
                embedding: encode(embedding_vector(&req.model, item, dims), base64),
            })
            .collect();
        let json = json_bytes(&EmbeddingList {
            object: "list",
            data,
            model: &req.model,
            usage: EmbeddingUsage {
                prompt_tokens: out.input,
                total_tokens: out.input,
            },
        });
        Reply {
            json,
            events: Vec::new(),
        }
    }

    /// Never called: an embeddings answer is no stream.
    fn stream_error(_call: &Call<EmbeddingsRequest>, _out: &Output, _sent: usize) -> Bytes {
        Bytes::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn length(v: &[f32]) -> f64 {
        v.iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt()
    }

    #[test]
    fn vectors_are_deterministic_unit_length_and_input_dependent() {
        let a = embedding_vector("m", InputItem::Text("hello"), 64);
        assert_eq!(a, embedding_vector("m", InputItem::Text("hello"), 64));
        assert_eq!(a.len(), 64);
        assert!((length(&a) - 1.0).abs() < 1e-5, "{}", length(&a));
        assert_ne!(a, embedding_vector("m", InputItem::Text("hellp"), 64));
        assert_ne!(a, embedding_vector("other", InputItem::Text("hello"), 64));
        let t = embedding_vector("m", InputItem::Tokens(&[1, 2, 3]), 8);
        assert_eq!(t.len(), 8);
        assert_ne!(t, embedding_vector("m", InputItem::Tokens(&[1, 2, 4]), 8));
        assert_eq!(default_dimensions("text-embedding-3-large"), 3072);
        assert_eq!(default_dimensions("text-embedding-3-small"), 1536);
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let Vector::Base64(s) = encode(vec![1.0, -2.0], true) else {
            panic!("a string");
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("base64");
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat());
        assert_eq!(serde_json::to_string(&encode(vec![0.5], false)).unwrap(), "[0.5]");
    }
}

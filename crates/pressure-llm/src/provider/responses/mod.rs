//! OpenAI Responses provider wire (to be written).

//! OpenAI Responses ingress (to be written).

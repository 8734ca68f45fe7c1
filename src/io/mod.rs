//! The edges of the pipeline that touch the file system: `load` (memory map, zero-copy decode,
//! external data confined to the model's folder) and `save` (streamed, atomic).

pub mod computed;
pub mod early;
pub mod external;
pub mod load;
pub mod save;
pub mod unknown;

pub use early::EarlyCopy;
pub use external::ExternalData;
pub use load::{load_model, LoadedModel};
pub use save::{save_model, SaveOptions, SaveSummary};

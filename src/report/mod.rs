//! Reports for people: the memory plan as an SVG picture.

mod svg;

pub use svg::plan_svg;

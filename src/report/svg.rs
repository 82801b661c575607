//! The memory plan as an SVG: node steps on x, byte offset on y, one rectangle per
//! tensor, one panel per buffer chunk, and the lower bound as a dashed line.

use std::fmt::Write as _;

use crate::graph::{Graph, Lifetimes};
use crate::plan::Plan;

const PANEL_WIDTH: f64 = 900.0;
const PANEL_HEIGHT: f64 = 320.0;
const MARGIN_LEFT: f64 = 90.0;
const MARGIN_TOP: f64 = 40.0;
const PANEL_GAP: f64 = 60.0;

/// Renders `plan` for `graph` as a standalone SVG document. `lower_bound` (bytes),
/// when given, is drawn as a dashed line in every panel.
pub fn plan_svg(graph: &Graph, plan: &Plan, lower_bound: Option<u64>) -> String {
    let lifetimes = Lifetimes::of(graph);
    let steps = lifetimes.steps.max(1) as f64;
    let panels: Vec<(usize, usize, u64)> = plan
        .buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.same_as.is_none())
        .flat_map(|(bi, b)| {
            b.chunks
                .iter()
                .enumerate()
                .map(move |(ci, c)| (bi, ci, c.size))
        })
        .collect();
    let height = MARGIN_TOP + panels.len().max(1) as f64 * (PANEL_HEIGHT + PANEL_GAP);
    let width = MARGIN_LEFT + PANEL_WIDTH + 40.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="monospace" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{MARGIN_LEFT}" y="20" font-size="14">{} — planner {}, total {} bytes{}</text>"#,
        escape(&graph.name),
        escape(&plan.planner),
        plan.total_size(),
        lower_bound
            .map(|b| format!(", lower bound {b} bytes"))
            .unwrap_or_default()
    );
    // The bound is for the whole plan: it is drawn in a panel only when there is one.
    let panel_bound = if panels.len() == 1 { lower_bound } else { None };
    for (panel, &(buffer, chunk, chunk_size)) in panels.iter().enumerate() {
        let top = MARGIN_TOP + panel as f64 * (PANEL_HEIGHT + PANEL_GAP) + 20.0;
        let scale = chunk_size.max(panel_bound.unwrap_or(0)).max(1);
        let scale_max = scale as f64;
        let y_of = |bytes: u64| top + PANEL_HEIGHT - bytes as f64 / scale_max * PANEL_HEIGHT;
        let _ = writeln!(
            out,
            r##"<text x="{MARGIN_LEFT}" y="{:.1}">buffer {buffer} ({}) chunk {chunk}: {chunk_size} bytes</text>"##,
            top - 6.0,
            escape(&plan.buffers[buffer].buffer_type.name)
        );
        let _ = writeln!(
            out,
            r##"<rect x="{MARGIN_LEFT}" y="{top:.1}" width="{PANEL_WIDTH}" height="{PANEL_HEIGHT}" fill="#f7f7f7" stroke="#888"/>"##
        );
        for tick in 0..=4u64 {
            let bytes = scale / 4 * tick;
            let _ = writeln!(
                out,
                r##"<text x="4" y="{:.1}" fill="#555">{}</text>"##,
                y_of(bytes) + 4.0,
                human(bytes)
            );
        }
        for tensor in &graph.tensors {
            if !graph.is_planned(tensor.id) {
                continue;
            }
            let (Some(p), Some(life)) = (plan.placement(tensor.id), lifetimes.get(tensor.id))
            else {
                continue;
            };
            if p.buffer.0 != buffer || p.chunk != chunk || p.size == 0 {
                continue;
            }
            let x = MARGIN_LEFT + f64::from(life.first) / steps * PANEL_WIDTH;
            let w = (f64::from(life.last - life.first + 1) / steps * PANEL_WIDTH).max(1.0);
            let y = y_of(p.end());
            let h = (p.size as f64 / scale_max * PANEL_HEIGHT).max(0.5);
            let hue = (tensor.id.0.wrapping_mul(47)) % 360;
            let _ = writeln!(
                out,
                r##"<rect x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}" fill="hsl({hue},65%,62%)" stroke="#333" stroke-width="0.3"><title>{} ({}) {} bytes @ {} steps {}..{}</title></rect>"##,
                escape(&tensor.name),
                tensor.id,
                tensor.size,
                p.offset,
                life.first,
                life.last
            );
        }
        if let Some(bound) = panel_bound {
            let y = y_of(bound);
            let _ = writeln!(
                out,
                r##"<line x1="{MARGIN_LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#c00" stroke-dasharray="6,4" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" fill="#c00">lower bound</text>"##,
                MARGIN_LEFT + PANEL_WIDTH,
                MARGIN_LEFT + PANEL_WIDTH - 80.0,
                y - 4.0
            );
        }
        let _ = writeln!(
            out,
            r##"<text x="{MARGIN_LEFT}" y="{:.1}" fill="#555">step 0</text><text x="{:.1}" y="{:.1}" fill="#555">step {}</text>"##,
            top + PANEL_HEIGHT + 14.0,
            MARGIN_LEFT + PANEL_WIDTH - 60.0,
            top + PANEL_HEIGHT + 14.0,
            lifetimes.steps.saturating_sub(1)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1}M", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1}K", b as f64 / 1024.0),
        b => format!("{b}"),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement};

    #[test]
    fn one_rectangle_per_planned_tensor_and_a_bound_line() {
        let mut b = GraphBuilder::new("g<1>");
        let x = b.input("x", DType::F32, &[4]);
        let y = b.node("relu", &[x], &[4], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let place = |offset| {
            Some(Placement {
                buffer: BufferId(0),
                chunk: 0,
                offset,
                size: 16,
            })
        };
        let plan = Plan {
            planner: "test".into(),
            placements: vec![place(0), place(16)],
            buffers: vec![BufferPlan {
                buffer_type: BufferTypeDesc::new("storage", 4, 1 << 20).expect("valid"),
                chunks: vec![ChunkPlan {
                    size: 32,
                    oversized: false,
                }],
                same_as: None,
            }],
            inplace: vec![],
        };
        let svg = plan_svg(&g, &plan, Some(32));
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<title>").count(), 2);
        assert!(svg.contains("lower bound"));
        assert!(svg.contains("g&lt;1&gt;"));
    }
}

#[cfg(test)]
mod chunk_tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::plan::{plan_graph, BufferTypeDesc};

    #[test]
    fn several_chunks_get_a_panel_each_scaled_to_the_chunk_without_a_bound_line() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[64]);
        let y = b.node("relu", &[x], &[64], false);
        let z = b.node("add", &[x, y], &[64], false);
        b.mark_output(z);
        let g = b.build().expect("valid");
        // 256-byte tensors, chunks of at most 512 bytes: three live at once need two.
        let storage = BufferTypeDesc::new("s", 4, 512).expect("valid");
        let plan = plan_graph(&g, &storage).expect("plans");
        assert!(plan.buffers[0].chunks.len() > 1);
        let svg = plan_svg(&g, &plan, Some(768));
        assert_eq!(svg.matches("chunk 1:").count(), 1);
        assert!(
            svg.contains("lower bound 768 bytes"),
            "the bound is in the title"
        );
        assert!(!svg.contains(">lower bound</text>"), "no per-panel line");
        // A rectangle never starts above its panel (y >= the panel's top).
        assert!(!svg.contains("y=\"-"));
    }
}

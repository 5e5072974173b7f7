//! One SVG per workload, written by hand: p95 wait (up) against overhead (across, on a log
//! scale, since the families span an order of magnitude), each family's frontier as a step
//! line through its points, and the oracle's point (no wait, its overhead).

use super::{Family, Point, Workload, pareto};

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
/// Left, right, top and bottom margins, for the axes' labels and the legend.
const MARGIN: (f64, f64, f64, f64) = (70.0, 200.0, 30.0, 50.0);

fn colour(family: Family) -> &'static str {
    match family {
        Family::Taskscaler => "#d62728",
        Family::Demand => "#1f77b4",
        Family::Warm => "#2ca02c",
        Family::Informed => "#9467bd",
    }
}

/// The plot's scales: overhead (log) and p95 to pixels.
struct Scale {
    log_min: f64,
    log_max: f64,
    p95_max: f64,
}

impl Scale {
    fn x(&self, overhead: f64) -> f64 {
        let share = (overhead.max(1.0).log10() - self.log_min) / (self.log_max - self.log_min);
        MARGIN.0 + share * (WIDTH - MARGIN.0 - MARGIN.1)
    }

    fn y(&self, p95: f64) -> f64 {
        HEIGHT - MARGIN.3 - p95 / self.p95_max * (HEIGHT - MARGIN.2 - MARGIN.3)
    }
}

pub fn svg(w: &Workload) -> String {
    // A family with no point on this workload (the informed one off the streams) is not drawn.
    let fronts: Vec<(Family, Vec<&Point>)> = Family::ALL
        .iter()
        .map(|&f| (f, pareto(&w.family(f), Point::overhead)))
        .filter(|(_, front)| !front.is_empty())
        .collect();
    let all = fronts.iter().flat_map(|(_, f)| f.iter());
    let overheads: Vec<f64> = all
        .clone()
        .map(|p| p.overhead())
        .chain([w.oracle_overhead])
        .collect();
    let lo = overheads
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let hi = overheads.iter().copied().fold(1.0, f64::max);
    let p95_max = all.map(|p| p.run.p95).fold(10.0, f64::max) * 1.1;
    let s = Scale {
        log_min: lo.log10().floor(),
        log_max: hi.log10().ceil().max(lo.log10().floor() + 1.0),
        p95_max,
    };
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"18\" font-size=\"14\">{}: p95 wait against overhead (idle + booting)</text>\n",
        MARGIN.0, w.name
    );
    out.push_str(&axes(&s));
    for (i, (family, front)) in fronts.iter().enumerate() {
        out.push_str(&line(&s, front, colour(*family)));
        out.push_str(&legend(i, family.label(), colour(*family)));
    }
    let (ox, oy) = (s.x(w.oracle_overhead), s.y(0.0));
    out.push_str(&format!(
        "<path d=\"M{ox:.1},{:.1} l6,8 l-12,0 z\" fill=\"black\"/>\n",
        oy - 8.0
    ));
    out.push_str(&legend(fronts.len(), "oracle", "black"));
    out.push_str("</svg>\n");
    out
}

/// A frontier as steps: from each point, level to the next one's overhead, then down.
fn line(s: &Scale, front: &[&Point], colour: &str) -> String {
    let mut d = String::new();
    for (i, p) in front.iter().enumerate() {
        let (x, y) = (s.x(p.overhead()), s.y(p.run.p95));
        if i == 0 {
            d.push_str(&format!("M{x:.1},{y:.1}"));
        } else {
            d.push_str(&format!(" H{x:.1} V{y:.1}"));
        }
    }
    let dots: String = front
        .iter()
        .map(|p| {
            format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"><title>{}: p95 {:.1} s, overhead {:.0}</title></circle>\n",
                s.x(p.overhead()),
                s.y(p.run.p95),
                p.setting,
                p.run.p95,
                p.overhead()
            )
        })
        .collect();
    format!("<path d=\"{d}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n{dots}")
}

fn legend(row: usize, label: &str, colour: &str) -> String {
    let x = WIDTH - MARGIN.1 + 15.0;
    let y = MARGIN.2 + 20.0 + row as f64 * 20.0;
    format!(
        "<rect x=\"{x}\" y=\"{:.0}\" width=\"12\" height=\"12\" fill=\"{colour}\"/><text x=\"{:.0}\" y=\"{y:.0}\">{label}</text>\n",
        y - 10.0,
        x + 18.0
    )
}

fn axes(s: &Scale) -> String {
    let (left, bottom) = (MARGIN.0, HEIGHT - MARGIN.3);
    let right = WIDTH - MARGIN.1;
    let mut out = format!(
        "<path d=\"M{left},{} V{bottom} H{right}\" fill=\"none\" stroke=\"black\"/>\n",
        MARGIN.2
    );
    let mut decade = s.log_min;
    while decade <= s.log_max + 1e-9 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powf(decade);
            if v.log10() > s.log_max + 1e-9 {
                break;
            }
            let x = s.x(v);
            out.push_str(&format!(
                "<line x1=\"{x:.1}\" y1=\"{bottom}\" x2=\"{x:.1}\" y2=\"{:.0}\" stroke=\"black\"/><text x=\"{x:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{v:.0}</text>\n",
                bottom + 5.0,
                bottom + 18.0
            ));
        }
        decade += 1.0;
    }
    let step = if s.p95_max > 60.0 { 20.0 } else { 10.0 };
    let mut v = 0.0;
    while v <= s.p95_max {
        let y = s.y(v);
        out.push_str(&format!(
            "<line x1=\"{:.0}\" y1=\"{y:.1}\" x2=\"{left}\" y2=\"{y:.1}\" stroke=\"black\"/><text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
            left - 5.0,
            left - 8.0,
            y + 4.0
        ));
        v += step;
    }
    out.push_str(&format!(
        "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">overhead, machine-minutes (log)</text>\n<text x=\"18\" y=\"{:.0}\" transform=\"rotate(-90 18 {:.0})\" text-anchor=\"middle\">p95 wait, s</text>\n",
        (left + right) / 2.0,
        HEIGHT - 12.0,
        (MARGIN.2 + bottom) / 2.0,
        (MARGIN.2 + bottom) / 2.0
    ));
    out
}

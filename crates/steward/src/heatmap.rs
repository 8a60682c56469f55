//! A heat map of a throughput matrix as a PNG: one square per pair (row = from, column =
//! to), dark blue for the slowest link through green to yellow for the fastest; the
//! diagonal is grey. No labels (no font rendering): the node order is the matrix's, which
//! `tomus topology show` prints beside it.

use crate::matrix::Matrix;

/// Pixels per cell side.
const CELL: usize = 24;
/// Pixels between cells.
const GAP: usize = 1;

/// RGB of `x` in [0, 1] on a blue-green-yellow ramp (viridis's ends and middle).
fn color(x: f64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 3] = [
        [68.0, 1.0, 84.0],
        [33.0, 145.0, 140.0],
        [253.0, 231.0, 37.0],
    ];
    let x = x.clamp(0.0, 1.0) * 2.0;
    let i = (x.floor() as usize).min(1);
    let f = x - i as f64;
    let mut out = [0u8; 3];
    for (c, o) in out.iter_mut().enumerate() {
        *o = (STOPS[i][c] + (STOPS[i + 1][c] - STOPS[i][c]) * f).round() as u8;
    }
    out
}

/// The PNG bytes of `m`'s heat map.
pub fn render(m: &Matrix) -> Result<Vec<u8>, String> {
    let n = m.len().max(1);
    let side = n * (CELL + GAP) + GAP;
    let mut pixels = vec![255u8; side * side * 3];
    let max = m
        .throughput
        .iter()
        .flatten()
        .copied()
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    for (a, row) in m.throughput.iter().enumerate() {
        for (b, &v) in row.iter().enumerate() {
            let rgb = if a == b {
                [160, 160, 160]
            } else {
                color(v / max)
            };
            for y in 0..CELL {
                let py = GAP + a * (CELL + GAP) + y;
                for x in 0..CELL {
                    let px = GAP + b * (CELL + GAP) + x;
                    let at = (py * side + px) * 3;
                    pixels[at..at + 3].copy_from_slice(&rgb);
                }
            }
        }
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, side as u32, side as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| e.to_string())?;
        w.write_image_data(&pixels).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_png_of_the_matrix_size_with_ramp_ends() {
        let m = Matrix::new(
            vec!["a".into(), "b".into()],
            vec![vec![0.0, 100.0], vec![10.0, 0.0]],
        );
        let bytes = render(&m).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!(info.width as usize, 2 * (CELL + GAP) + GAP);
        let at = |row: usize, col: usize| {
            let y = GAP + row * (CELL + GAP) + CELL / 2;
            let x = GAP + col * (CELL + GAP) + CELL / 2;
            let i = (y * info.width as usize + x) * 3;
            [buf[i], buf[i + 1], buf[i + 2]]
        };
        assert_eq!(at(0, 1), [253, 231, 37], "the fastest link is yellow");
        assert_eq!(at(0, 0), [160, 160, 160], "the diagonal is grey");
        assert_ne!(at(1, 0), at(0, 1));
    }
}

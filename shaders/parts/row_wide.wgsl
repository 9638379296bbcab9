// One row of a [.., m] state, m > 4: an array of the variant's MM floats.
alias Row = array<f32, MM>;

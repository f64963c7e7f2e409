"""Result schema, report rendering and baseline comparison."""

-- fragment (price.py splices it into complete_move.sql and c_move.sql as {{write_history}}):
-- the deleted hot rows (`ended` runs, `occ` occurrences) written once to their history.
), runs AS (
    INSERT INTO run_history ({{run_history_columns}})
    SELECT {{run_history_values}}
    FROM ended e
)
INSERT INTO occurrence_history ({{history_columns}})
SELECT {{history_values}}
FROM occ o;

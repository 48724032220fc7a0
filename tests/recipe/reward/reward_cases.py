"""Labelled scoring table for recipe/reward/__init__.py: (id, response, ground truth, score, pred).

Expected values are written by hand from the rules in recipe.reward.extract.normalize_answer and
mathematical equivalence, not copied from the implementation's output.
"""

from __future__ import annotations

# fmt: off
CASES: list[tuple[str, str, str, float, str]] = [
    # --- boxed, basic -------------------------------------------------------------------------
    ("boxed_int", "So the total is \\boxed{42}.", "42", 1.0, "42"),
    ("boxed_int_wrong", "So the total is \\boxed{41}.", "42", 0.0, "41"),
    ("boxed_spaces", "Thus \\boxed{ 7 }", "7", 1.0, "7"),
    ("boxed_dollars", "The answer is $\\boxed{12}$.", "12", 1.0, "12"),
    ("boxed_no_brace", "Final: \\boxed 9", "9", 1.0, "9"),
    ("fbox", "\\fbox{13}", "13", 1.0, "13"),
    ("boxed_nested_boxed", "\\boxed{\\boxed{8}}", "8", 1.0, "8"),
    # --- nested braces ------------------------------------------------------------------------
    ("nested_frac", "We get \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1.0, "\\frac{\\sqrt{3}}{2}"),
    ("nested_deep", "\\boxed{{{{1}}}}", "1", 1.0, "{{{1}}}"),
    ("unbalanced_last_box", "First \\boxed{3} then \\boxed{4", "3", 1.0, "3"),
    ("escaped_brace_set", "\\boxed{\\{1, 2, 3\\}}", "\\{1,2,3\\}", 1.0, "\\{1,2,3\\}"),
    # --- fractions ----------------------------------------------------------------------------
    ("dfrac", "\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),
    ("tfrac", "\\boxed{\\tfrac{1}{2}}", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),
    ("frac_short", "\\boxed{\\frac12}", "\\frac{1}{2}", 1.0, "\\frac{1}{2}"),
    ("slash_frac", "\\boxed{3/4}", "\\frac{3}{4}", 1.0, "\\frac{3}{4}"),
    ("frac_vs_decimal", "\\boxed{0.5}", "\\frac{1}{2}", 1.0, "0.5"),
    ("leading_dot", "\\boxed{.5}", "\\frac{1}{2}", 1.0, "0.5"),
    ("frac_unreduced", "\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 1.0, "\\frac{2}{4}"),
    ("frac_wrong", "\\boxed{\\frac{1}{3}}", "\\frac{1}{2}", 0.0, "\\frac{1}{3}"),
    ("neg_frac", "\\boxed{-\\frac{3}{5}}", "-\\frac{3}{5}", 1.0, "-\\frac{3}{5}"),
    # --- sqrt ---------------------------------------------------------------------------------
    ("sqrt_short", "\\boxed{2\\sqrt2}", "2\\sqrt{2}", 1.0, "2\\sqrt{2}"),
    ("sqrt_equiv", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1.0, "\\sqrt{8}"),
    ("sqrt_wrong", "\\boxed{\\sqrt{3}}", "2\\sqrt{2}", 0.0, "\\sqrt{3}"),
    ("sqrt_frac", "\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1.0, "\\frac{\\sqrt{2}}{2}"),
    # --- intervals ----------------------------------------------------------------------------
    ("interval", "\\boxed{[1, 2)}", "[1,2)", 1.0, "[1,2)"),
    ("interval_left_right", "\\boxed{\\left( -\\infty, 3 \\right]}", "(-\\infty,3]", 1.0, "(-\\infty,3]"),
    ("interval_wrong_closure", "\\boxed{(1, 2)}", "[1,2)", 0.0, "(1,2)"),
    ("interval_union", "\\boxed{(-\\infty,0)\\cup(1,\\infty)}", "(-\\infty,0)\\cup(1,\\infty)", 1.0,
     "(-\\infty,0)\\cup(1,\\infty)"),
    # --- sets / tuples ------------------------------------------------------------------------
    ("set_order", "\\boxed{\\{2, 1\\}}", "\\{1,2\\}", 1.0, "\\{2,1\\}"),
    ("set_wrong", "\\boxed{\\{1, 3\\}}", "\\{1,2\\}", 0.0, "\\{1,3\\}"),
    ("tuple", "\\boxed{(3, -4)}", "(3,-4)", 1.0, "(3,-4)"),
    ("list_of_roots", "\\boxed{2, 5}", "2,5", 1.0, "2,5"),
    # --- percent ------------------------------------------------------------------------------
    ("percent_latex", "\\boxed{25\\%}", "25", 1.0, "25"),
    ("percent_plain", "The answer is 25%.", "25\\%", 1.0, "25"),
    ("percent_wrong", "\\boxed{20\\%}", "25", 0.0, "20"),
    # --- units / text -------------------------------------------------------------------------
    ("units_text", "\\boxed{5 \\text{ cm}}", "5", 1.0, "5"),
    ("units_mbox", "\\boxed{12\\mbox{ dollars}}", "12", 1.0, "12"),
    ("units_plain_words", "The answer is 18 square units.", "18", 1.0, "18"),
    ("degrees", "\\boxed{30^\\circ}", "30", 1.0, "30"),
    ("degrees_braced", "\\boxed{30^{\\circ}}", "30", 1.0, "30"),
    ("text_only", "\\boxed{\\text{(B)}}", "(B)", 1.0, "(B)"),
    ("text_words", "\\boxed{\\text{no solution}}", "\\text{no solution}", 1.0, "no solution"),
    ("dollar_amount", "\\boxed{\\$18.90}", "18.90", 1.0, "18.90"),
    # --- negative numbers ---------------------------------------------------------------------
    ("negative", "\\boxed{-7}", "-7", 1.0, "-7"),
    ("negative_space", "\\boxed{- 7}", "-7", 1.0, "-7"),
    ("unicode_minus", "\\boxed{\u22127}", "-7", 1.0, "-7"),
    ("negative_wrong_sign", "\\boxed{7}", "-7", 0.0, "7"),
    ("negative_zero", "\\boxed{-0}", "0", 1.0, "0"),
    # --- thousands separators / decimals -------------------------------------------------------
    ("thousands", "\\boxed{1,000}", "1000", 1.0, "1000"),
    ("thousands_latex", "\\boxed{1{,}234{,}567}", "1234567", 1.0, "1234567"),
    ("thousands_thin_space", "\\boxed{10\\,000}", "10000", 1.0, "10000"),
    ("decimal_trailing_zero", "\\boxed{5.0}", "5", 1.0, "5"),
    ("decimal_vs_int_wrong", "\\boxed{5.5}", "5", 0.0, "5.5"),
    ("big_int_wrong", "\\boxed{123456789012345678901}", "123456789012345678902", 0.0, "123456789012345678901"),
    # --- expressions / equations -------------------------------------------------------------
    ("var_assign", "\\boxed{x = 5}", "5", 1.0, "5"),
    ("var_assign_sub", "\\boxed{a_1=3}", "3", 1.0, "3"),
    ("equation_kept", "\\boxed{x+y=5}", "x+y=5", 1.0, "x+y=5"),
    ("pi_expr", "\\boxed{2\\pi}", "2\\pi", 1.0, "2\\pi"),
    ("pi_space_kept", "\\boxed{\\pi r^2}", "\\pi r^2", 1.0, "\\pi r^2"),
    ("poly_equiv", "\\boxed{x^2+2x+1}", "(x+1)^2", 1.0, "x^2+2x+1"),
    ("exponent", "\\boxed{2^{10}}", "1024", 1.0, "2^{10}"),
    ("displaystyle", "\\boxed{\\displaystyle \\frac{7}{9}}", "\\frac{7}{9}", 1.0, "\\frac{7}{9}"),
    # --- multiple boxed answers (last wins) -----------------------------------------------------
    ("multi_boxed_last", "Maybe \\boxed{3}? No: \\boxed{4}", "4", 1.0, "4"),
    ("multi_boxed_last_wrong", "\\boxed{4} ... actually \\boxed{3}", "4", 0.0, "3"),
    # --- answer tail and last-number fallbacks -----------------------------------------------------
    ("answer_colon", "Work...\nAnswer: 17", "17", 1.0, "17"),
    ("answer_is", "so the final answer is 2/3.", "\\frac{2}{3}", 1.0, "\\frac{2}{3}"),
    ("answer_markdown", "**Final Answer:** $\\frac{5}{6}$", "\\frac{5}{6}", 1.0, "\\frac{5}{6}"),
    ("last_number", "3 apples plus 4 apples make 7 apples", "7", 1.0, "7"),
    ("last_number_wrong", "I think it is 8 or maybe 9", "8", 0.0, "9"),
    ("gsm_style", "She has 1,250 dollars left.", "1250", 1.0, "1250"),
    # --- the last final-answer marker wins, whatever its kind (issue 14) ------------------------
    ("answer_after_box", "First \\boxed{41}, but that double counts.\nAnswer: 42", "42", 1.0, "42"),
    ("box_after_answer", "Answer: 42\nNo, wait: \\boxed{41}", "42", 0.0, "41"),
    ("answer_after_answer", "Answer: 41\nRe-checking.\nAnswer: 42", "42", 1.0, "42"),
    ("empty_answer_line_uses_box", "So \\boxed{42}.\nAnswer:", "42", 1.0, "42"),
    ("answer_next_line", "Answer:\n\n42", "42", 1.0, "42"),
    ("weak_answer_is_not_a_marker", "Thus \\boxed{5}. This answer is correct.", "5", 1.0, "5"),
    ("final_answer_is_after_box", "\\boxed{6}\nThe final answer is 7.", "7", 1.0, "7"),
    # --- an Answer: line loses its trailing prose and punctuation ---------------------------
    ("answer_line_full_stop", "Work...\nAnswer: 42.", "42", 1.0, "42"),
    ("answer_line_minerva", "Answer: 42. I hope it is correct.", "42", 1.0, "42"),
    ("answer_line_remark", "Answer: 42 (the number of ways)", "42", 1.0, "42"),
    ("answer_line_remark_number", "Answer: 12 (the number of ways is 13)", "13", 0.0, "12"),
    ("answer_line_clause", "The answer is 42, which is 6 times 7.", "42", 1.0, "42"),
    ("answer_line_prose_lead", "Answer: 42 is the number of ways out of 100", "100", 0.0, "42"),
    ("answer_line_prose_copula", "Final Answer: The volume of $V$ is 120. I hope it is correct.", "120", 1.0,
     "120"),
    ("answer_line_bold", "**Answer: 42**", "42", 1.0, "42"),
    ("answer_line_factorial", "Answer: 5!", "5", 0.0, "5!"),
    ("answer_line_decimal", "Answer: 3.25.", "\\frac{13}{4}", 1.0, "3.25"),
    ("answer_line_tuple", "Answer: (7, 6). Done.", "6", 0.0, "(7,6)"),
    ("answer_line_text", "Answer: no solution.", "\\text{no solution}", 1.0, "no solution"),
    ("answer_line_constant_chain", "Answer: 2^{10} = 1024", "1024", 1.0, "1024"),
    # --- fallbacks keep whole expressions: never a wrong answer cut into a right one -------------
    ("fallback_fraction_whole", "So the probability is 2/3", "3", 0.0, "\\frac{2}{3}"),
    ("fallback_latex_fraction_whole", "So the probability is \\frac{2}{3}.", "3", 0.0, "\\frac{2}{3}"),
    ("fallback_tuple_whole", "The solution is the pair (7, 6)", "6", 0.0, "(7,6)"),
    ("fallback_interval_whole", "So x lies in [2, 5)", "5", 0.0, "[2,5)"),
    ("fallback_signed", "It dropped to -7", "7", 0.0, "-7"),
    ("fallback_decimal", "The ratio is 3.5", "5", 0.0, "3.5"),
    ("fallback_glued_letters", "AZYUK2A", "2", 0.0, "AZYUK2A"),
    ("fallback_sqrt_coefficient", "The side is 2\\sqrt{3}", "\\sqrt{3}", 0.0, "2\\sqrt{3}"),
    ("fallback_unit", "It weighs 1,000.5kg", "1000.5", 1.0, "1000.5"),
    ("fallback_math_span", "The pair is $(7, 6)$. Done", "(7,6)", 1.0, "(7,6)"),
    ("fallback_span_then_number", "The domain of $f(x)$ has 19 points", "19", 1.0, "19"),
    # --- a run of adjacent boxes is one answer ---------------------------------------------------
    ("box_run_not_last_box", "The roots are \\boxed{2} and \\boxed{3}.", "3", 0.0, "2,3"),
    ("box_run_list", "The roots are \\boxed{2} and \\boxed{3}.", "2,3", 1.0, "2,3"),
    ("box_run_set", "The roots are \\boxed{2} and \\boxed{3}.", "\\{2,3\\}", 1.0, "2,3"),
    ("box_run_quad_text", "\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}", "(6,2),(2,2)", 1.0,
     "(2,2),(6,2)"),
    ("boxes_separated_by_prose", "I first got \\boxed{41}. After fixing it: \\boxed{42}", "42", 1.0, "42"),
    # --- equations stay whole --------------------------------------------------------------------
    ("equation_line", "\\boxed{y = -\\frac12 x + \\frac34}", "2x+4y-3=0", 1.0, "y=-\\frac{1}{2}x+\\frac{3}{4}"),
    ("equation_line_wrong", "\\boxed{y = 2x + 1}", "y=2x+3", 0.0, "y=2x+1"),
    ("relation_kept", "\\boxed{x \\neq 3}", "3", 0.0, "x\\neq3"),
    # --- thousands vs lists, matrices ------------------------------------------------------------
    ("list_not_thousands", "\\boxed{32, 349}", "32349", 0.0, "32, 349"),
    ("latex_thousands_bang", "\\boxed{11,\\!111}", "11111", 1.0, "11111"),
    ("matrix_rows_kept", "$\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}$", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}",
     1.0, "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    # --- no answer --------------------------------------------------------------------------
    ("no_answer", "I don't know how to solve this.", "5", 0.0, ""),
    ("empty", "", "5", 0.0, ""),
    ("empty_box", "\\boxed{}", "5", 0.0, ""),
]
# fmt: on

# Surface variants that must map to one pred (the consistency entropy counts one class for them).
SAME_PRED_GROUPS: list[list[str]] = [
    [
        "\\boxed{\\dfrac{1}{2}}",
        "\\boxed{\\frac{1}{2}}",
        "\\boxed{\\frac12}",
        "\\boxed{1/2}",
        "$\\boxed{\\tfrac{1}{2}}$",
    ],
    [
        "\\boxed{$5$}",
        "\\boxed{ 5 }",
        "\\boxed{5 \\text{ cm}}",
        "\\boxed{5}",
        "Answer: 5",
        "\\boxed{5.}",
        "\\boxed{5.00}",
    ],
    ["\\boxed{\\left(1, 2\\right)}", "\\boxed{(1,2)}", "\\boxed{( 1 , 2 )}"],
    ["\\boxed{1,000}", "\\boxed{1000}", "\\boxed{1{,}000}", "\\boxed{1\\,000}"],
    ["\\boxed{-3}", "\\boxed{- 3}", "\\boxed{\u22123}", "\\boxed{x=-3}"],
    # one answer class whatever the marker (issue 14): DAPO's Answer: line and a box
    [
        "Answer: 42",
        "Answer: 42.",
        "Answer: 42. I hope it is correct.",
        "Answer: 42 (the number of ways)",
        "**Answer:** $42$",
        "\\boxed{42}",
        "The final answer is $\\boxed{42}$.",
        "Final Answer: The final answer is 42. I hope it is correct.",
        "The answer is 42, which is 6 times 7.",
        "\\boxed{41} was wrong.\nAnswer: 42",
    ],
    ["Answer: 2/3", "\\boxed{\\frac{2}{3}}", "Answer: $\\dfrac{2}{3}$.", "So the probability is 2/3"],
]

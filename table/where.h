// The `where` filter of the table steps: a restricted SQL boolean expression whose
// `:name` placeholders are bound from the event payload, never spliced.
//
// The text comes from the operator's config (trusted-ish), the values from event
// payloads (hostile). CompileWhere accepts only this grammar (keywords in any case):
//
//   expr      := and_expr { OR and_expr }
//   and_expr  := not_expr { AND not_expr }
//   not_expr  := NOT not_expr | predicate
//   predicate := '(' expr ')'
//              | value IS [NOT] NULL
//              | value [NOT] IN '(' value { ',' value } ')'
//              | column [NOT] IN '(' SELECT column FROM table [WHERE expr] ')'
//              | value [NOT] BETWEEN value AND value
//              | value [NOT] LIKE value
//              | value ( = | <=> | <> | != | < | <= | > | >= ) value
//   value     := column | :placeholder | number | 'string' | NULL | TRUE | FALSE
//   column    := [A-Za-z0-9_$]+ (not one of the keywords above) | `[A-Za-z0-9_$]+`
//   :placeholder := ':' [A-Za-z_][A-Za-z0-9_]*   a top-level field of the payload
//   number    := ['-'] digits ['.' digits]
//   'string'  := single-quoted, '' for a quote inside; no backslashes
//
// so "space_id = :space_id AND kind IN ('doc', :kind)" or "1 = 1", or an entity
// graph's child table: "order_id IN (SELECT id FROM orders WHERE customer_id = :cid)".
// A subquery nests one level only (none inside it), selects one column of one table
// (no alias, join, UNION, ORDER BY or LIMIT), and its columns are emitted qualified
// with its table (`orders`.`customer_id`), so none silently refers to the outer row.
// No functions, no arithmetic. Rejected before parsing, with a reason naming it: ';',
// '--', '/*', '#', double quotes, backslashes, '?', and an odd number of single quotes
// (even inside string literals: these are config mistakes, not data).
//
// The compiled SQL is rebuilt from the tokens (columns backticked, keywords upper
// case), so nothing outside the grammar can reach the server.
//
// LIKE: a payload value is a value, not a pattern. `column LIKE :name` compiles to
// `column LIKE ? ESCAPE '!'` and the bound string has its '!', '%' and '_' escaped
// (CompiledWhere::like_literal, EscapeLike), so "%" matches only a "%". ('!' and not
// '\\': a backslash in the statement's text changes meaning with the server's
// NO_BACKSLASH_ESCAPES; '!' is the same on MariaDB and MySQL 8 in every sql_mode.) A
// step whose config says "like_patterns": true compiles with like_patterns and binds
// the value as the pattern it holds. Patterns written in the filter's text ('doc%')
// are the operator's and are patterns either way.
//
// Thread safety: pure functions.
#pragma once

#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dsync::table {

// A `where` text outside the grammar; what() is one line without the step name.
class WhereError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct CompiledWhere {
  std::string sql;                         // `?` for each placeholder, in order
  std::vector<std::string> params;         // payload field bound to each `?`
  // For each `?`, the column it is compared with ("" when none): a string payload
  // value compared with an integer column must be a canonical integer.
  std::vector<std::string> param_columns;
  // For each `?`, the table of that column: "" for the step's table, else a
  // subquery's table.
  std::vector<std::string> param_tables;
  // For each `?`, true when it is the pattern of a LIKE compiled to match literally:
  // its value is bound through EscapeLike.
  std::vector<bool> like_literal;
  std::set<std::string> columns;           // every column of the step's table the filter reads
  struct Subquery {
    std::string table;
    std::set<std::string> columns;         // every column of `table` it reads
  };
  std::vector<Subquery> subqueries;        // in order of appearance
  // Columns of the step's table that every row the filter matches holds one value in:
  // a conjunct "column = :placeholder" or "column = number" (either way round) of an
  // AND at the top (no OR at the top, no NOT or parentheses around it). `param`: the
  // placeholder's index, or -1 for a number (its text in `number`).
  struct Pin {
    std::string column;
    int param = -1;
    std::string number;
  };
  std::vector<Pin> pins;
};

// Throws WhereError. like_patterns: payload values bound as LIKE patterns are
// patterns (the step's "like_patterns": true); default: they match literally.
CompiledWhere CompileWhere(std::string_view text, bool like_patterns = false);

// `value` with '!', '%' and '_' escaped by '!', for `LIKE ? ESCAPE '!'`.
std::string EscapeLike(std::string_view value);

// [A-Za-z0-9_$]{1,64}: a table or column name usable inside backticks.
bool IsPlainIdentifier(std::string_view name);

}  // namespace dsync::table

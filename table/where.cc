#include "table/where.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace dsync::table {
namespace {

constexpr size_t kMaxWhereLength = 4096;
constexpr size_t kMaxPlaceholders = 256;

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

enum class Tok { kWord, kQuotedColumn, kPlaceholder, kNumber, kString, kOp, kLParen, kRParen,
                 kComma, kMinus, kEnd };

struct Token {
  Tok kind;
  std::string text;  // kWord: as written; kQuotedColumn/kPlaceholder: the bare name
  size_t pos;
};

[[noreturn]] void Fail(const std::string& why) { throw WhereError(why); }

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Mistakes that would turn a filter into an injection vector are named explicitly.
void RejectDangerous(std::string_view text) {
  if (text.empty()) Fail("is empty (use \"1 = 1\" to match every row)");
  if (text.size() > kMaxWhereLength) Fail("is longer than " + std::to_string(kMaxWhereLength) + " characters");
  if (text.find(';') != std::string_view::npos) Fail("must not contain ';'");
  if (text.find("--") != std::string_view::npos) Fail("must not contain '--' (a comment)");
  if (text.find("/*") != std::string_view::npos) Fail("must not contain '/*' (a comment)");
  if (text.find('#') != std::string_view::npos) Fail("must not contain '#' (a comment)");
  if (text.find('"') != std::string_view::npos) Fail("must not contain '\"' (use single quotes for strings)");
  if (text.find('\\') != std::string_view::npos) Fail("must not contain a backslash");
  if (text.find('?') != std::string_view::npos) Fail("must not contain '?' (use :name placeholders)");
  if (std::count(text.begin(), text.end(), '\'') % 2 != 0) Fail("has unbalanced single quotes");
  if (std::count(text.begin(), text.end(), '`') % 2 != 0) Fail("has unbalanced backticks");
}

// ( ) , - and = are tokens of one character whatever follows them.
std::optional<Tok> OneCharToken(char c) {
  switch (c) {
    case '(': return Tok::kLParen;
    case ')': return Tok::kRParen;
    case ',': return Tok::kComma;
    case '-': return Tok::kMinus;
    case '=': return Tok::kOp;
    default: return std::nullopt;
  }
}

std::vector<Token> Tokenize(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    size_t start = i;
    if (c == '\'') {
      std::string lit = "'";
      ++i;
      for (;;) {
        if (i >= s.size()) Fail("has an unterminated string literal");
        if (s[i] == '\'') {
          if (i + 1 < s.size() && s[i + 1] == '\'') {
            lit += "''";
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        if (static_cast<unsigned char>(s[i]) < 0x20) Fail("has a control character in a string literal");
        lit += s[i++];
      }
      out.push_back({Tok::kString, lit + "'", start});
    } else if (c == '`') {
      size_t close = s.find('`', i + 1);
      if (close == std::string_view::npos) Fail("has unbalanced backticks");
      std::string name(s.substr(i + 1, close - i - 1));
      if (!IsPlainIdentifier(name)) Fail("has a bad column name `" + name + "` (allowed: A-Z a-z 0-9 _ $)");
      out.push_back({Tok::kQuotedColumn, name, start});
      i = close + 1;
    } else if (c == ':') {
      ++i;
      size_t b = i;
      if (i < s.size() && (std::isalpha(static_cast<unsigned char>(s[i])) || s[i] == '_')) {
        while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      }
      if (i == b) Fail("has ':' without a placeholder name at offset " + std::to_string(start));
      out.push_back({Tok::kPlaceholder, std::string(s.substr(b, i - b)), start});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      if (i + 1 < s.size() && s[i] == '.' && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      // "12abc" is a column name in MySQL; take it as a word.
      if (i < s.size() && IsWordChar(s[i]) && s.substr(start, i - start).find('.') == std::string_view::npos) {
        while (i < s.size() && IsWordChar(s[i])) ++i;
        out.push_back({Tok::kWord, std::string(s.substr(start, i - start)), start});
      } else {
        out.push_back({Tok::kNumber, std::string(s.substr(start, i - start)), start});
      }
    } else if (IsWordChar(c)) {
      while (i < s.size() && IsWordChar(s[i])) ++i;
      out.push_back({Tok::kWord, std::string(s.substr(start, i - start)), start});
    } else if (std::optional<Tok> single = OneCharToken(c)) {
      out.push_back({*single, std::string(1, c), start});
      ++i;
    } else if (c == '<' || c == '>' || c == '!') {
      std::string op(1, c);
      if (s.substr(i, 3) == "<=>") {
        op = "<=>";
      } else if (i + 1 < s.size() && (s[i + 1] == '=' || (c == '<' && s[i + 1] == '>'))) {
        op += s[i + 1];
      }
      if (op == "!") Fail("has an unsupported operator '!' at offset " + std::to_string(start));
      out.push_back({Tok::kOp, op, start});
      i += op.size();
    } else {
      Fail(std::string("has an unsupported character '") +
           (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f ? std::string(1, c) : "?") +
           "' at offset " + std::to_string(start));
    }
  }
  out.push_back({Tok::kEnd, "", s.size()});
  return out;
}

bool IsKeyword(const std::string& upper) {
  static const std::set<std::string> kKeywords = {"AND", "OR", "NOT", "IN", "IS", "NULL", "LIKE", "BETWEEN",
                                                  "TRUE", "FALSE", "SELECT", "FROM", "WHERE", "UNION"};
  return kKeywords.count(upper) > 0;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, bool like_patterns) : t_(std::move(tokens)), like_patterns_(like_patterns) {}

  CompiledWhere Run() {
    Expr();
    if (PeekKeyword("UNION")) Fail("must not use UNION (at offset " + std::to_string(Peek().pos) + ")");
    if (Peek().kind != Tok::kEnd) Unexpected("end of the filter");
    if (out_.params.size() > kMaxPlaceholders) {
      Fail("has more than " + std::to_string(kMaxPlaceholders) + " placeholders");
    }
    if (or_at_top_) out_.pins.clear();
    return std::move(out_);
  }

 private:
  // A value as parsed: its SQL text, and what it is (for placeholder/column pairing).
  struct Value {
    std::string sql;
    std::optional<std::string> column;
    std::optional<size_t> param;  // index into out_.params
    bool number = false;
  };

  const Token& Peek() const { return t_[i_]; }
  bool PeekKeyword(const char* kw) const {
    return Peek().kind == Tok::kWord && Upper(Peek().text) == kw;
  }
  bool TakeKeyword(const char* kw) {
    if (!PeekKeyword(kw)) return false;
    ++i_;
    return true;
  }
  void ExpectKeyword(const char* kw) {
    if (!TakeKeyword(kw)) Unexpected(kw);
  }
  [[noreturn]] void Unexpected(const std::string& wanted) const {
    const Token& tok = Peek();
    std::string got = tok.kind == Tok::kEnd ? "the end" : "'" + (tok.kind == Tok::kPlaceholder ? ":" + tok.text : tok.text) + "'";
    Fail("is not a supported filter: expected " + wanted + " at offset " + std::to_string(tok.pos) +
         ", got " + got);
  }
  // The ')' that closes what is open; `wanted` says what else may stand there.
  void CloseParen(const std::string& wanted) {
    if (Peek().kind != Tok::kRParen) Unexpected(wanted);
    ++i_;
    Emit(")");
  }
  void Emit(const std::string& s) {
    if (!sql().empty() && sql().back() != '(' && s != ")" && s != ",") sql() += ' ';
    sql() += s;
  }
  std::string& sql() { return out_.sql; }

  void Expr() {
    AndExpr();
    while (TakeKeyword("OR")) {
      if (AtTop()) or_at_top_ = true;
      Emit("OR");
      AndExpr();
    }
  }
  void AndExpr() {
    NotExpr();
    while (TakeKeyword("AND")) {
      Emit("AND");
      NotExpr();
    }
  }
  void NotExpr() {
    if (TakeKeyword("NOT")) {
      Emit("NOT");
      ++nots_;
      NotExpr();
      --nots_;
      return;
    }
    Predicate();
  }

  void Predicate() {
    if (Peek().kind == Tok::kLParen) {
      ++i_;
      Emit("(");
      ++parens_;
      Expr();
      --parens_;
      CloseParen("')'");
      return;
    }
    Value left = ParseValue();
    Emit(left.sql);
    std::vector<Value> right;
    auto operand = [&] {
      right.push_back(ParseValue());
      Emit(right.back().sql);
    };
    if (TakeKeyword("IS")) {
      Emit("IS");
      if (TakeKeyword("NOT")) Emit("NOT");
      ExpectKeyword("NULL");
      Emit("NULL");
      return;
    }
    bool negated = TakeKeyword("NOT");
    if (negated) Emit("NOT");
    if (TakeKeyword("IN")) {
      Emit("IN");
      if (Peek().kind != Tok::kLParen) Unexpected("'(' after IN");
      ++i_;
      Emit("(");
      if (PeekKeyword("SELECT")) {
        Subquery(left);
        return;
      }
      for (;;) {
        operand();
        if (Peek().kind == Tok::kComma) {
          ++i_;
          Emit(",");
          continue;
        }
        CloseParen("',' or ')'");
        break;
      }
    } else if (TakeKeyword("BETWEEN")) {
      Emit("BETWEEN");
      operand();
      ExpectKeyword("AND");
      Emit("AND");
      operand();
    } else if (TakeKeyword("LIKE")) {
      Emit("LIKE");
      operand();
      if (right.back().param && !like_patterns_) {
        out_.like_literal[*right.back().param] = true;
        Emit("ESCAPE '!'");
      }
    } else if (!negated && Peek().kind == Tok::kOp) {
      const bool equals = Peek().text == "=";
      Emit(Peek().text);
      ++i_;
      operand();
      if (equals && AtTop() && nots_ == 0) Pin(left, right[0]);
    } else {
      Unexpected(negated ? "IN, BETWEEN or LIKE after NOT" : "a comparison (=, <>, IN, IS NULL, LIKE, BETWEEN ...)");
    }
    // Pair placeholders with the column they are compared with.
    if (left.column) {
      for (const Value& v : right) {
        if (v.param) out_.param_columns[*v.param] = *left.column;
      }
    } else if (left.param && right.size() == 1 && right[0].column) {
      out_.param_columns[*left.param] = *right[0].column;
    }
  }

  // Not inside parentheses or a subquery.
  bool AtTop() const { return parens_ == 0 && !inner_; }
  // "column = :placeholder" or "column = number", either way round.
  void Pin(const Value& a, const Value& b) {
    for (const auto& [column, value] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      if (!column->column || (!value->param && !value->number)) continue;
      if (value->param) {
        out_.pins.push_back({*column->column, static_cast<int>(*value->param), ""});
      } else {
        out_.pins.push_back({*column->column, -1, value->sql});
      }
      return;
    }
  }

  // IN '(' SELECT column FROM table [WHERE expr] ')', the '(' already taken: one
  // level, the same grammar inside, its columns qualified with its table so that none
  // silently refers to the outer row.
  void Subquery(const Value& left) {
    const size_t at = Peek().pos;
    if (inner_) Fail("nests subqueries (at offset " + std::to_string(at) + "); one level only");
    if (!left.column) Fail("has a subquery compared with something other than a column (at offset " +
                           std::to_string(at) + ")");
    ExpectKeyword("SELECT");
    std::string column = Name("a column after SELECT");
    if (Peek().kind == Tok::kComma) Fail("has a subquery selecting more than one column (at offset " +
                                         std::to_string(Peek().pos) + ")");
    if (!PeekKeyword("FROM")) Unexpected("FROM");
    ++i_;
    std::string table = Name("a table after FROM");
    if (Peek().kind == Tok::kWord && Peek().text.find('.') == std::string::npos && !IsKeyword(Upper(Peek().text))) {
      Fail("has a subquery with more than 'SELECT column FROM table [WHERE ...]' (an alias, JOIN, GROUP BY ...) "
           "at offset " + std::to_string(Peek().pos));
    }
    inner_ = true;
    inner_table_ = table;
    out_.subqueries.push_back({table, {column}});
    Emit("SELECT " + Qualified(table, column) + " FROM `" + table + "`");
    if (TakeKeyword("WHERE")) {
      Emit("WHERE");
      Expr();
    }
    inner_ = false;
    if (PeekKeyword("UNION")) Fail("must not use UNION (at offset " + std::to_string(Peek().pos) + ")");
    CloseParen("')' closing the subquery");
  }

  // A plain or backticked name.
  std::string Name(const std::string& wanted) {
    const Token& tok = Peek();
    if (tok.kind == Tok::kQuotedColumn) {
      ++i_;
      return tok.text;
    }
    if (tok.kind != Tok::kWord || IsKeyword(Upper(tok.text))) Unexpected(wanted);
    if (!IsPlainIdentifier(tok.text)) Fail("has a bad name '" + tok.text + "'");
    ++i_;
    if (Peek().kind == Tok::kLParen) {
      Fail("must not call functions ('" + tok.text + "(' at offset " + std::to_string(tok.pos) + ")");
    }
    return tok.text;
  }

  static std::string Qualified(const std::string& table, const std::string& column) {
    return "`" + table + "`.`" + column + "`";
  }

  Value ParseValue() {
    const Token& tok = Peek();
    if (tok.kind == Tok::kWord && Upper(tok.text) == "SELECT") {
      Fail("has a subquery outside 'column [NOT] IN (SELECT ...)' (at offset " + std::to_string(tok.pos) + ")");
    }
    if (tok.kind == Tok::kLParen && i_ + 1 < t_.size() && t_[i_ + 1].kind == Tok::kWord &&
        Upper(t_[i_ + 1].text) == "SELECT") {
      Fail("has a subquery outside 'column [NOT] IN (SELECT ...)' (at offset " + std::to_string(tok.pos) + ")");
    }
    if (tok.kind == Tok::kWord && Upper(tok.text) == "UNION") {
      Fail("must not use UNION (at offset " + std::to_string(tok.pos) + ")");
    }
    switch (tok.kind) {
      case Tok::kQuotedColumn:
        ++i_;
        return Column(tok.text);
      case Tok::kWord: {
        std::string up = Upper(tok.text);
        if (up == "NULL" || up == "TRUE" || up == "FALSE") {
          ++i_;
          return {up, std::nullopt, std::nullopt};
        }
        if (IsKeyword(up)) Unexpected("a value");
        if (!IsPlainIdentifier(tok.text)) Fail("has a bad column name '" + tok.text + "'");
        ++i_;
        if (Peek().kind == Tok::kLParen) {
          Fail("must not call functions ('" + tok.text + "(' at offset " + std::to_string(tok.pos) + ")");
        }
        return Column(tok.text);
      }
      case Tok::kPlaceholder: {
        ++i_;
        out_.params.push_back(tok.text);
        out_.param_columns.emplace_back();
        out_.param_tables.push_back(inner_ ? inner_table_ : "");
        out_.like_literal.push_back(false);
        return {"?", std::nullopt, out_.params.size() - 1};
      }
      case Tok::kNumber:
        ++i_;
        return {tok.text, std::nullopt, std::nullopt, true};
      case Tok::kMinus: {
        ++i_;
        if (Peek().kind != Tok::kNumber) Unexpected("a number after '-'");
        std::string n = "-" + Peek().text;
        ++i_;
        return {n, std::nullopt, std::nullopt, true};
      }
      case Tok::kString:
        ++i_;
        return {tok.text, std::nullopt, std::nullopt};
      default:
        Unexpected("a column, :placeholder, number or 'string'");
    }
  }

  Value Column(const std::string& name) {
    if (inner_) {
      out_.subqueries.back().columns.insert(name);
      return {Qualified(inner_table_, name), name, std::nullopt};
    }
    out_.columns.insert(name);
    return {"`" + name + "`", name, std::nullopt};
  }

  std::vector<Token> t_;
  const bool like_patterns_;  // payload values bound into LIKE are patterns
  size_t i_ = 0;
  bool inner_ = false;        // inside a subquery
  int parens_ = 0;            // open parentheses around the predicate
  int nots_ = 0;              // NOTs around it
  bool or_at_top_ = false;    // an OR outside every parenthesis: no column is pinned
  std::string inner_table_;   // its table
  CompiledWhere out_;
};

}  // namespace

bool IsPlainIdentifier(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), IsWordChar);
}

CompiledWhere CompileWhere(std::string_view text, bool like_patterns) {
  RejectDangerous(text);
  return Parser(Tokenize(text), like_patterns).Run();
}

std::string EscapeLike(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '!' || c == '%' || c == '_') out += '!';
    out += c;
  }
  return out;
}

}  // namespace dsync::table

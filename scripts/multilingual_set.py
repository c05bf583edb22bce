"""Write the multilingual test set (ctx_retrieval/data/multilingual): quarterly reports of invented organisations in
Chinese, Japanese, German and Vietnamese, and questions whose answer chunk never names the organisation.

Each language has 12 reports of the same shape (an introduction that names the organisation, then sections on
revenue, staff, a new site, the leadership and the outlook that do not), so a question such as "how many employees
does Huaxin have?" matches the staff section of every report equally, and only the title or introduction tells
them apart: the ACME example of Anthropic's write-up, in four languages. The facts (figures, cities, names) differ
per report; two wordings of each section and of each question alternate. 48 questions per language (4 per report);
half the Vietnamese ones are typed without diacritics, as people often type them.

    python scripts/multilingual_set.py            # rewrites the JSONL files; the tests check they are current
"""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "ctx_retrieval" / "data" / "multilingual"
LANGUAGES = ("zh", "ja", "de", "vi", "ko", "ru", "tr", "hi", "ar")

# name, city, industry, founded, driver, facility, site city, chief executive
ORGS: dict[str, list[tuple[str, ...]]] = {
    "zh": [
        ("华信科技", "深圳", "电子元件制造商", "1998", "海外订单", "工厂", "苏州", "李明华"),
        ("宏达物流", "武汉", "物流公司", "2004", "电商旺季", "仓储中心", "郑州", "王建国"),
        ("青山制药", "杭州", "制药企业", "1992", "新药上市", "研发中心", "上海", "陈静"),
        ("星河软件", "北京", "软件公司", "2010", "云服务订阅", "数据中心", "贵阳", "赵磊"),
        ("东方纺织", "南通", "纺织企业", "1985", "出口恢复", "印染厂", "盐城", "周丽娟"),
        ("金桥银行", "天津", "商业银行", "1996", "贷款业务", "客服中心", "石家庄", "孙志强"),
        ("南岭食品", "广州", "食品公司", "2001", "节日礼盒", "冷链仓库", "佛山", "黄晓燕"),
        ("蓝海航运", "宁波", "航运公司", "1999", "运价上涨", "集装箱码头", "舟山", "吴海涛"),
        ("长城建材", "唐山", "建材企业", "1993", "基建项目", "水泥厂", "保定", "刘德胜"),
        ("瑞丰农业", "哈尔滨", "农业公司", "2007", "大豆丰收", "粮食加工厂", "齐齐哈尔", "郑秀兰"),
        ("云帆电动", "合肥", "电动汽车制造商", "2015", "新车型交付", "电池工厂", "芜湖", "马骏"),
        ("锦绣文旅", "成都", "文化旅游企业", "2012", "暑期游客", "主题公园", "乐山", "杨帆"),
    ],
    "ja": [
        ("北斗精機", "名古屋", "精密機械メーカー", "1962", "海外からの受注", "工場", "浜松", "山田太郎"),
        ("桜川製薬", "大阪", "製薬会社", "1948", "新薬の発売", "研究所", "神戸", "佐藤花子"),
        ("青葉物流", "仙台", "物流会社", "1975", "通販の拡大", "物流センター", "郡山", "鈴木一郎"),
        ("白鷺電機", "姫路", "電機メーカー", "1958", "空調機器の需要", "組立工場", "岡山", "高橋誠"),
        ("若松食品", "北九州", "食品メーカー", "1966", "冷凍食品の好調", "冷凍倉庫", "熊本", "田中美紀"),
        ("東雲ソフト", "東京", "ソフトウェア会社", "2005", "クラウド契約", "データセンター", "札幌", "伊藤健"),
        ("朝日紡績", "岐阜", "繊維メーカー", "1935", "輸出の回復", "染色工場", "福井", "渡辺修"),
        ("富岳建設", "静岡", "建設会社", "1970", "公共工事", "資材センター", "沼津", "中村聡"),
        ("瀬戸内海運", "広島", "海運会社", "1952", "運賃の上昇", "コンテナターミナル", "松山", "小林直樹"),
        ("柏木銀行", "千葉", "地方銀行", "1950", "住宅ローン", "コールセンター", "柏", "加藤由美"),
        ("紅葉電池", "京都", "電池メーカー", "1988", "電気自動車向けの出荷", "電池工場", "滋賀", "吉田大輔"),
        ("湯の花観光", "別府", "観光会社", "1980", "夏休みの観光客", "温泉ホテル", "湯布院", "松本涼子"),
    ],
    "de": [
        ("Bergmann Werkzeuge", "Solingen", "Werkzeughersteller", "1921", "der Nachfrage aus Skandinavien",
         "Werk", "Chemnitz", "Anna Bergmann"),
        ("Rheinfeld Logistik", "Duisburg", "Logistikdienstleister", "1987", "dem Onlinehandel",
         "Logistikzentrum", "Kassel", "Markus Weber"),
        ("Alpenmilch", "Kempten", "Molkereibetrieb", "1952", "neuen Käsesorten", "Lager", "Rosenheim",
         "Johanna Huber"),
        ("Nordlicht Software", "Kiel", "Softwareanbieter", "2009", "Cloud-Abonnements", "Rechenzentrum",
         "Rostock", "Lars Petersen"),
        ("Sonnenberg Textil", "Augsburg", "Textilhersteller", "1899", "der Erholung im Export", "Färbewerk",
         "Hof", "Claudia Maier"),
        ("Weserbank", "Bremen", "Regionalinstitut", "1871", "dem Kreditgeschäft", "Servicezentrum",
         "Oldenburg", "Thomas Krüger"),
        ("Lindner Pharma", "Darmstadt", "Arzneimittelhersteller", "1934", "einem neuen Medikament",
         "Forschungszentrum", "Mainz", "Sabine Lindner"),
        ("Hansa Reederei", "Hamburg", "Reedereibetrieb", "1910", "höheren Frachtraten", "Containerterminal",
         "Wilhelmshaven", "Jan Hoffmann"),
        ("Kraus Baustoffe", "Regensburg", "Baustoffproduzent", "1963", "öffentlichen Bauprojekten",
         "Zementwerk", "Passau", "Stefan Kraus"),
        ("Talblick Agrar", "Magdeburg", "Agrarbetrieb", "1991", "einer guten Rapsernte", "Getreidesilo",
         "Stendal", "Monika Schulz"),
        ("Voltwerk Mobil", "Stuttgart", "Elektroautohersteller", "2016", "der Auslieferung neuer Modelle",
         "Batteriewerk", "Heilbronn", "Felix Braun"),
        ("Seeblick Touristik", "Konstanz", "Reiseveranstalter", "1978", "den Sommerferien", "Hotel",
         "Lindau", "Eva Zimmermann"),
    ],
    "vi": [
        ("Công ty Sao Mai", "Hà Nội", "nhà sản xuất linh kiện điện tử", "1998", "đơn hàng xuất khẩu",
         "Nhà máy", "Bắc Ninh", "Nguyễn Văn Hùng"),
        ("Công ty Thành Đạt", "Hải Phòng", "công ty logistics", "2005", "mùa mua sắm trực tuyến",
         "Trung tâm kho vận", "Hưng Yên", "Trần Thị Lan"),
        ("Dược phẩm Bình Minh", "TP. Hồ Chí Minh", "doanh nghiệp dược phẩm", "1993", "thuốc mới ra mắt",
         "Trung tâm nghiên cứu", "Bình Dương", "Lê Quang Minh"),
        ("Phần mềm Phương Nam", "Đà Nẵng", "công ty phần mềm", "2011", "dịch vụ đám mây",
         "Trung tâm dữ liệu", "Quy Nhơn", "Phạm Đức Anh"),
        ("Dệt may Hồng Hà", "Nam Định", "doanh nghiệp dệt may", "1986", "xuất khẩu phục hồi",
         "Xưởng nhuộm", "Thái Bình", "Hoàng Thị Mai"),
        ("Ngân hàng Kim Sơn", "Hà Nội", "ngân hàng thương mại", "1995", "mảng cho vay",
         "Trung tâm chăm sóc khách hàng", "Vinh", "Vũ Minh Tuấn"),
        ("Thực phẩm An Khang", "Cần Thơ", "công ty thực phẩm", "2002", "quà Tết Trung thu",
         "Kho lạnh", "Long An", "Đặng Thu Hà"),
        ("Vận tải biển Hải Đăng", "Vũng Tàu", "công ty vận tải biển", "1999", "giá cước tăng",
         "Cảng container", "Cái Mép", "Bùi Văn Thắng"),
        ("Vật liệu Trường Sơn", "Thanh Hóa", "doanh nghiệp vật liệu xây dựng", "1992", "các dự án hạ tầng",
         "Nhà máy xi măng", "Ninh Bình", "Đỗ Mạnh Cường"),
        ("Nông nghiệp Phú Điền", "Đồng Tháp", "công ty nông nghiệp", "2008", "vụ lúa bội thu",
         "Nhà máy xay xát", "An Giang", "Ngô Thị Hạnh"),
        ("Xe điện Việt Tiến", "Hải Dương", "nhà sản xuất xe điện", "2017", "giao mẫu xe mới",
         "Nhà máy pin", "Quảng Ninh", "Lý Hoàng Nam"),
        ("Du lịch Biển Xanh", "Nha Trang", "công ty du lịch", "2003", "khách du lịch mùa hè",
         "Khu nghỉ dưỡng", "Phú Quốc", "Trịnh Thu Trang"),
    ],
    "ko": [
        ("한빛전자", "수원", "전자부품 제조업체", "1995", "해외 주문", "공장", "평택", "김민준"),
        ("바다물류", "부산", "물류회사", "2003", "온라인 쇼핑 성수기", "물류센터", "김해", "이서연"),
        ("청솔제약", "대전", "제약회사", "1989", "신약 출시", "연구소", "오송", "박지훈"),
        ("누리소프트", "성남", "소프트웨어 회사", "2011", "클라우드 구독", "데이터센터", "춘천", "최유진"),
        ("가람섬유", "대구", "섬유업체", "1978", "수출 회복", "염색공장", "구미", "정현우"),
        ("한결은행", "서울", "시중은행", "1967", "대출 사업", "고객센터", "광주", "강수민"),
        ("들녘식품", "전주", "식품회사", "2000", "명절 선물세트", "냉장창고", "익산", "조은비"),
        ("푸른해운", "인천", "해운회사", "1984", "운임 상승", "컨테이너 터미널", "군산", "윤재성"),
        ("단단건설", "울산", "건설자재 기업", "1991", "공공 건설사업", "시멘트 공장", "포항", "장미경"),
        ("새싹농업", "청주", "농업회사", "2009", "쌀 풍작", "도정공장", "충주", "임동훈"),
        ("번개모터스", "창원", "전기차 제조업체", "2016", "신차 인도", "배터리 공장", "진주", "한소희"),
        ("여울관광", "강릉", "관광회사", "1999", "여름 휴가철 관광객", "리조트", "속초", "오태양"),
    ],
    "ru": [
        ("«Северный Луч»", "Архангельск", "производитель электроники", "1996", "экспортным заказам", "завод",
         "Вологде", "Иван Петров"),
        ("«Волга Логистик»", "Самара", "логистическая компания", "2004", "росту онлайн-торговли",
         "складской комплекс", "Тольятти", "Мария Соколова"),
        ("«Берёзка Фарм»", "Казань", "фармацевтическая компания", "1993", "выпуску нового препарата",
         "исследовательский центр", "Набережных Челнах", "Алексей Морозов"),
        ("«Облако Софт»", "Новосибирск", "разработчик программного обеспечения", "2010", "облачным подпискам",
         "центр обработки данных", "Томске", "Ольга Кузнецова"),
        ("«Ивановская Ткань»", "Иваново", "текстильное предприятие", "1985", "восстановлению экспорта",
         "красильный цех", "Шуе", "Сергей Васильев"),
        ("«Уральский Кредит»", "Екатеринбург", "коммерческий банк", "1994", "кредитованию", "контактный центр",
         "Челябинске", "Наталья Попова"),
        ("«Кубанские Продукты»", "Краснодар", "пищевая компания", "2001", "праздничным наборам",
         "холодильный склад", "Армавире", "Дмитрий Лебедев"),
        ("«Балтийский Флот»", "Калининград", "судоходная компания", "1998", "росту фрахтовых ставок",
         "контейнерный терминал", "Балтийске", "Андрей Новиков"),
        ("«Камень и Цемент»", "Белгород", "производитель стройматериалов", "1991", "государственным стройкам",
         "цементный завод", "Старом Осколе", "Елена Козлова"),
        ("«Алтайское Поле»", "Барнаул", "агрохолдинг", "2007", "хорошему урожаю пшеницы", "элеватор", "Бийске",
         "Павел Волков"),
        ("«Искра Моторс»", "Нижний Новгород", "производитель электромобилей", "2016", "поставкам новых моделей",
         "аккумуляторный завод", "Дзержинске", "Артём Зайцев"),
        ("«Чёрное Море Тур»", "Сочи", "туристическая компания", "2002", "летнему сезону", "курортный отель",
         "Анапе", "Светлана Павлова"),
    ],
    "tr": [
        ("Yıldız Elektronik", "Bursa", "elektronik bileşen üreticisi", "1997", "ihracat siparişleri", "fabrika",
         "Eskişehir", "Mehmet Yılmaz"),
        ("Kıyı Lojistik", "İzmir", "lojistik şirketi", "2005", "çevrimiçi alışveriş sezonu", "lojistik merkezi",
         "Manisa", "Ayşe Kaya"),
        ("Çınar İlaç", "İstanbul", "ilaç şirketi", "1988", "yeni ilacın piyasaya çıkışı", "araştırma merkezi",
         "Kocaeli", "Ahmet Demir"),
        ("Bulut Yazılım", "Ankara", "yazılım şirketi", "2012", "bulut abonelikleri", "veri merkezi", "Konya",
         "Zeynep Şahin"),
        ("Gökkuşağı Tekstil", "Denizli", "tekstil üreticisi", "1979", "ihracattaki toparlanma", "boyahane",
         "Uşak", "Mustafa Çelik"),
        ("Güneş Bankası", "İstanbul", "ticari banka", "1964", "kredi işleri", "çağrı merkezi", "Sakarya",
         "Elif Aydın"),
        ("Bereket Gıda", "Gaziantep", "gıda şirketi", "2002", "bayram paketleri", "soğuk hava deposu", "Adana",
         "Hasan Öztürk"),
        ("Dalga Denizcilik", "Mersin", "denizcilik şirketi", "1995", "navlun artışı", "konteyner terminali",
         "İskenderun", "Emine Arslan"),
        ("Kaya Yapı", "Kayseri", "yapı malzemesi üreticisi", "1990", "kamu inşaat projeleri", "çimento fabrikası",
         "Sivas", "Hüseyin Doğan"),
        ("Toprak Tarım", "Şanlıurfa", "tarım şirketi", "2008", "bol buğday hasadı", "un fabrikası", "Mardin",
         "Fatma Kılıç"),
        ("Şimşek Otomotiv", "Kocaeli", "elektrikli araç üreticisi", "2017", "yeni model teslimatları",
         "batarya fabrikası", "Bilecik", "Burak Koç"),
        ("Deniz Turizm", "Antalya", "turizm şirketi", "2001", "yaz tatili turistleri", "tatil köyü", "Muğla",
         "Selin Aksoy"),
    ],
    "hi": [
        ("सूर्य इलेक्ट्रॉनिक्स", "पुणे", "इलेक्ट्रॉनिक पुर्ज़े बनाने वाली कंपनी", "1996", "विदेशी ऑर्डरों", "कारख़ाना",
         "नासिक", "राजेश शर्मा"),
        ("गंगा लॉजिस्टिक्स", "कानपुर", "लॉजिस्टिक्स कंपनी", "2004", "ऑनलाइन ख़रीदारी के मौसम", "गोदाम", "लखनऊ",
         "सुनीता वर्मा"),
        ("आरोग्य फ़ार्मा", "अहमदाबाद", "दवा कंपनी", "1990", "नई दवा की शुरुआत", "अनुसंधान केंद्र", "वडोदरा",
         "अमित पटेल"),
        ("बादल सॉफ़्टवेयर", "बेंगलुरु", "सॉफ़्टवेयर कंपनी", "2011", "क्लाउड सदस्यताओं", "डेटा केंद्र", "मैसूरु",
         "प्रिया नायर"),
        ("रंगोली वस्त्र", "सूरत", "कपड़ा कंपनी", "1982", "निर्यात में सुधार", "रंगाई कारख़ाना", "भरूच",
         "विकास मेहता"),
        ("हिमालय बैंक", "देहरादून", "वाणिज्यिक बैंक", "1970", "ऋण कारोबार", "ग्राहक सेवा केंद्र", "हरिद्वार",
         "नेहा जोशी"),
        ("अन्नपूर्णा फ़ूड्स", "इंदौर", "खाद्य कंपनी", "2000", "त्योहारी उपहार पैकों", "शीत भंडार", "उज्जैन",
         "संजय गुप्ता"),
        ("सागर शिपिंग", "कोच्चि", "जहाज़रानी कंपनी", "1993", "माल भाड़े में बढ़ोतरी", "कंटेनर टर्मिनल",
         "तूतीकोरिन", "अनिल मेनन"),
        ("शिला सीमेंट", "जयपुर", "निर्माण सामग्री कंपनी", "1988", "सरकारी निर्माण परियोजनाओं", "सीमेंट कारख़ाना",
         "अजमेर", "कविता सिंह"),
        ("हरित कृषि", "लुधियाना", "कृषि कंपनी", "2007", "गेहूँ की अच्छी फ़सल", "आटा मिल", "पटियाला",
         "गुरप्रीत गिल"),
        ("बिजली मोटर्स", "चेन्नई", "इलेक्ट्रिक वाहन निर्माता", "2016", "नए मॉडलों की डिलीवरी", "बैटरी कारख़ाना",
         "होसुर", "अर्जुन रेड्डी"),
        ("तरंग पर्यटन", "गोवा", "पर्यटन कंपनी", "2003", "गर्मी की छुट्टियों के पर्यटकों", "रिसॉर्ट", "कोंकण",
         "मीरा डिसूज़ा"),
    ],
    "ar": [
        ("شركة النخيل للإلكترونيات", "الرياض", "شركة لتصنيع المكونات الإلكترونية", "1995", "طلبات التصدير",
         "مصنع", "الخرج", "خالد العتيبي"),
        ("شركة الصحراء للنقل", "دبي", "شركة خدمات لوجستية", "2004", "موسم التسوق الإلكتروني", "مركز لوجستي",
         "العين", "فاطمة الزهراني"),
        ("شركة الشفاء للأدوية", "عمّان", "شركة أدوية", "1991", "إطلاق دواء جديد", "مركز أبحاث", "إربد",
         "محمد الخطيب"),
        ("شركة السحابة للبرمجيات", "القاهرة", "شركة برمجيات", "2012", "اشتراكات الخدمات السحابية", "مركز بيانات",
         "الإسكندرية", "نور حسن"),
        ("شركة الحرير للنسيج", "حلب", "شركة نسيج", "1980", "تعافي الصادرات", "مصبغة", "حماة", "سامر الحلبي"),
        ("بنك الواحة", "الدوحة", "بنك تجاري", "1969", "نشاط الإقراض", "مركز خدمة العملاء", "الخور",
         "مريم الكواري"),
        ("شركة البركة للأغذية", "الدار البيضاء", "شركة أغذية", "2001", "هدايا الأعياد", "مستودع تبريد", "الرباط",
         "يوسف بنعلي"),
        ("شركة الموج للملاحة", "جدة", "شركة ملاحة بحرية", "1994", "ارتفاع أسعار الشحن", "محطة حاويات", "ينبع",
         "عبدالله الغامدي"),
        ("شركة الصخر للإسمنت", "تونس", "شركة مواد بناء", "1989", "مشاريع البناء الحكومية", "مصنع إسمنت", "صفاقس",
         "ليلى بن صالح"),
        ("شركة السنابل الزراعية", "أربيل", "شركة زراعية", "2008", "وفرة محصول القمح", "مطحنة دقيق", "دهوك",
         "آزاد كريم"),
        ("شركة البرق للسيارات", "أبوظبي", "شركة لتصنيع السيارات الكهربائية", "2017", "تسليم الطرازات الجديدة",
         "مصنع بطاريات", "الرويس", "سلمى المنصوري"),
        ("شركة الشاطئ للسياحة", "مسقط", "شركة سياحة", "2002", "سياح العطلة الصيفية", "منتجع", "صلالة",
         "حمد البلوشي"),
    ],
}

MONTHS_DE = ("April", "Mai", "Juni")


def _facts(n: int) -> dict[str, Any]:
    """Figures for report ``n``: different for each report, fixed for the set."""
    return {"rev": 12 + 7 * n, "pct": 2 + (n * 3) % 11, "staff": 800 + 430 * n, "rd": 10 + (n * 7) % 25,
            "hired": 40 + 25 * n, "month": 4 + n % 3, "ceo_year": 2012 + n % 10, "pct2": 1 + n % 5,
            "up": n % 4 != 3}


def _zh(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name}2023年第二季度经营报告\n\n{name}是一家总部位于{city}的{industry}，成立于{founded}年。"
        "本报告介绍公司2023年第二季度的经营情况。\n\n",
        (f"## 营收\n\n本季度营收为{f['rev']}亿元，比上一季度增长{f['pct']}%，增长主要来自{driver}。\n\n" if a else
         f"## 营业收入\n\n第二季度实现营业收入{f['rev']}亿元，环比增长{f['pct']}%。{driver}是主要的增长来源。\n\n"),
        (f"## 员工\n\n截至六月底，公司员工总数为{f['staff']}人，其中研发人员占{f['rd']}%。\n\n" if a else
         f"## 人员情况\n\n六月底在职员工共{f['staff']}人，比年初增加{f['hired']}人。\n\n"),
        (f"## 新项目\n\n位于{site}的新{facility}已于{f['month']}月正式投入使用。\n\n" if a else
         f"## 投资项目\n\n公司在{site}投资建设的{facility}于{f['month']}月落成。\n\n"),
        (f"## 管理层\n\n{ceo}自{f['ceo_year']}年起担任首席执行官。\n\n" if a else
         f"## 公司治理\n\n董事会于{f['ceo_year']}年任命{ceo}为首席执行官，任期至今。\n\n"),
        f"## 展望\n\n管理层预计第三季度营收将{'增长' if f['up'] else '下降'}{f['pct2']}%，并将继续控制成本。\n",
    ]
    questions = [
        ("revenue", f"{name}第二季度的营收增长了多少？" if a else f"{name}上个季度收入涨了百分之几？"),
        ("staff", f"{name}有多少名员工？" if a else f"{name}现在一共有多少员工？"),
        ("site", f"{name}的新{facility}建在哪里？" if a else f"{name}在哪个城市建了新{facility}？"),
        ("chief", f"谁是{name}的首席执行官？" if a else f"{name}的CEO是谁？"),
    ]
    return sections, questions


def _ja(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name} 2023年度 第2四半期報告\n\n{name}は{city}に本社を置く{industry}で、{founded}年に設立された。"
        "本報告書は2023年度第2四半期の業績をまとめたものである。\n\n",
        (f"## 売上高\n\n当四半期の売上高は{f['rev']}億円で、前四半期比{f['pct']}%増加した。"
         f"主な要因は{driver}である。\n\n" if a else
         f"## 業績\n\n第2四半期の売上は{f['rev']}億円となり、前期から{f['pct']}%伸びた。\n\n"),
        (f"## 従業員\n\n6月末時点の従業員数は{f['staff']}人で、そのうち研究開発部門が{f['rd']}%を占める。\n\n" if a else
         f"## 人員\n\n6月末の社員数は{f['staff']}人となり、年初から{f['hired']}人増えた。\n\n"),
        (f"## 新拠点\n\n{site}の新しい{facility}が{f['month']}月に稼働を開始した。\n\n" if a else
         f"## 設備投資\n\n{f['month']}月、{site}に{facility}を新設した。\n\n"),
        (f"## 経営陣\n\n{ceo}は{f['ceo_year']}年から代表取締役社長を務めている。\n\n" if a else
         f"## ガバナンス\n\n取締役会は{f['ceo_year']}年に{ceo}を社長に選任した。\n\n"),
        f"## 見通し\n\n経営陣は第3四半期の売上高が{f['pct2']}%{'増加' if f['up'] else '減少'}すると見込んでいる。\n",
    ]
    questions = [
        ("revenue", f"{name}の第2四半期の売上高はどれくらい増えましたか？" if a else
         f"{name}の売上は前期比で何%伸びましたか？"),
        ("staff", f"{name}の従業員は何人ですか？" if a else f"{name}の社員数を教えてください"),
        ("site", f"{name}の新しい{facility}はどこにありますか？" if a else f"{name}はどこに{facility}を作りましたか？"),
        ("chief", f"{name}の社長は誰ですか？" if a else f"{name}の代表取締役は誰？"),
    ]
    return sections, questions


def _de(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    month = MONTHS_DE[f["month"] - 4]
    sections = [
        f"# {name} – Quartalsbericht Q2 2023\n\n{name} ist ein {industry} mit Sitz in {city}, gegründet {founded}. "
        "Dieser Bericht beschreibt die Geschäftsentwicklung im zweiten Quartal 2023.\n\n",
        (f"## Umsatz\n\nDer Umsatz stieg gegenüber dem Vorquartal um {f['pct']} % auf {f['rev']} Mio. Euro, vor allem "
         f"dank {driver}.\n\n" if a else
         f"## Geschäftsentwicklung\n\nIm zweiten Quartal wurden Erlöse von {f['rev']} Mio. Euro erzielt, ein Plus von "
         f"{f['pct']} % gegenüber dem ersten Quartal.\n\n"),
        (f"## Mitarbeiter\n\nEnde Juni waren {f['staff']} Mitarbeiterinnen und Mitarbeiter beschäftigt, davon "
         f"{f['rd']} % in Forschung und Entwicklung.\n\n" if a else
         f"## Personal\n\nDie Belegschaft wuchs bis Ende Juni auf {f['staff']} Beschäftigte; seit Jahresbeginn kamen "
         f"{f['hired']} hinzu.\n\n"),
        (f"## Neue Standorte\n\nDas neue {facility} in {site} wurde im {month} in Betrieb genommen.\n\n" if a else
         f"## Investitionen\n\nIm {month} wurde in {site} ein neues {facility} eröffnet.\n\n"),
        (f"## Vorstand\n\n{ceo} steht seit {f['ceo_year']} an der Spitze des Vorstands.\n\n" if a else
         f"## Unternehmensführung\n\nDer Aufsichtsrat berief {ceo} im Jahr {f['ceo_year']} an die Spitze des "
         "Vorstands.\n\n"),
        f"## Ausblick\n\nFür das dritte Quartal erwartet der Vorstand einen Umsatz"
        f"{'anstieg' if f['up'] else 'rückgang'} von {f['pct2']} %.\n",
    ]
    questions = [
        ("revenue", f"Um wie viel Prozent ist der Umsatz von {name} im zweiten Quartal gestiegen?" if a else
         f"Wie stark wuchsen die Erlöse bei {name}?"),
        ("staff", f"Wie viele Mitarbeiter hat {name}?" if a else f"Wie groß ist die Belegschaft von {name}?"),
        ("site", f"Wo hat {name} das neue {facility} eröffnet?" if a else
         f"In welcher Stadt steht das neue {facility} von {name}?"),
        ("chief", f"Wer leitet den Vorstand von {name}?" if a else f"Wer ist Vorstandschef bei {name}?"),
    ]
    return sections, questions


def without_diacritics(text: str) -> str:
    """As typed on a keyboard without Vietnamese input: marks dropped, đ as d."""
    text = text.replace("đ", "d").replace("Đ", "D")
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if not unicodedata.combining(ch))


def _vi(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name} – Báo cáo kinh doanh quý II năm 2023\n\n{name} là {industry} có trụ sở tại {city}, thành lập "
        f"năm {founded}. Báo cáo này trình bày kết quả kinh doanh quý II năm 2023.\n\n",
        (f"## Doanh thu\n\nDoanh thu quý này đạt {f['rev']} tỷ đồng, tăng {f['pct']}% so với quý trước, chủ yếu nhờ "
         f"{driver}.\n\n" if a else
         f"## Kết quả kinh doanh\n\nTrong quý II, công ty ghi nhận doanh thu {f['rev']} tỷ đồng, cao hơn quý I là "
         f"{f['pct']}%.\n\n"),
        (f"## Nhân sự\n\nĐến cuối tháng 6, tổng số nhân viên là {f['staff']} người, trong đó {f['rd']}% làm việc ở bộ "
         "phận nghiên cứu và phát triển.\n\n" if a else
         f"## Lao động\n\nCuối tháng 6, công ty có {f['staff']} lao động, tăng {f['hired']} người so với đầu năm.\n\n"),
        (f"## Dự án mới\n\n{facility} mới tại {site} đã chính thức đi vào hoạt động từ tháng "
         f"{f['month']}.\n\n" if a else
         f"## Đầu tư\n\nTháng {f['month']}, công ty khánh thành {facility.lower()} tại {site}.\n\n"),
        (f"## Ban lãnh đạo\n\n{ceo} giữ chức tổng giám đốc từ năm {f['ceo_year']}.\n\n" if a else
         f"## Quản trị\n\nHội đồng quản trị bổ nhiệm {ceo} làm tổng giám đốc vào năm {f['ceo_year']}.\n\n"),
        f"## Triển vọng\n\nBan lãnh đạo dự kiến doanh thu quý III sẽ {'tăng' if f['up'] else 'giảm'} "
        f"{f['pct2']}%.\n",
    ]
    questions = [
        ("revenue", f"Doanh thu quý II của {name} tăng bao nhiêu phần trăm?"),
        ("staff", f"{name} có bao nhiêu nhân viên?"),
        ("site", f"{facility} mới của {name} ở đâu?"),
        ("chief", f"Ai là tổng giám đốc của {name}?"),
    ]
    return sections, questions


def _ko(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name} 2023년 2분기 경영 보고서\n\n{name}는 {city}에 본사를 둔 {industry}로, {founded}년에 설립되었다. "
        "이 보고서는 2023년 2분기 경영 실적을 정리한 것이다.\n\n",
        (f"## 매출\n\n이번 분기 매출은 {f['rev']}억 원으로 전 분기보다 {f['pct']}% 증가했으며, 주된 요인은 "
         f"{driver}였다.\n\n" if a else
         f"## 실적\n\n2분기 매출액은 {f['rev']}억 원을 기록해 1분기 대비 {f['pct']}% 늘었다.\n\n"),
        (f"## 직원\n\n6월 말 기준 전체 직원 수는 {f['staff']}명이며, 그중 연구개발 인력이 {f['rd']}%를 차지한다.\n\n"
         if a else f"## 인력 현황\n\n6월 말 임직원은 모두 {f['staff']}명으로, 연초보다 {f['hired']}명 늘었다.\n\n"),
        (f"## 신규 사업장\n\n{site}에 새로 지은 {facility}이 {f['month']}월에 가동을 시작했다.\n\n" if a else
         f"## 투자\n\n{f['month']}월 {site}에 {facility}을 새로 열었다.\n\n"),
        (f"## 경영진\n\n{ceo} 대표이사는 {f['ceo_year']}년부터 회사를 이끌고 있다.\n\n" if a else
         f"## 지배구조\n\n이사회는 {f['ceo_year']}년 {ceo}를 대표이사로 선임했다.\n\n"),
        f"## 전망\n\n경영진은 3분기 매출이 {f['pct2']}% {'증가' if f['up'] else '감소'}할 것으로 예상한다.\n",
    ]
    questions = [
        ("revenue", f"{name}의 2분기 매출은 얼마나 늘었나요?" if a else f"{name} 매출 증가율이 몇 퍼센트야?"),
        ("staff", f"{name} 직원은 몇 명인가요?" if a else f"{name}에는 임직원이 몇 명 있어?"),
        ("site", f"{name}의 새 {facility}은 어디에 있나요?" if a else f"{name}가 {facility}을 어디에 지었어?"),
        ("chief", f"{name}의 대표이사는 누구인가요?" if a else f"{name} 대표가 누구야?"),
    ]
    return sections, questions


def _ru(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name}: отчёт за второй квартал 2023 года\n\nКомпания {name} — {industry} со штаб-квартирой в городе "
        f"{city}, основана в {founded} году. В отчёте описаны результаты второго квартала 2023 года.\n\n",
        (f"## Выручка\n\nВыручка за квартал составила {f['rev']} млрд рублей и выросла на {f['pct']} % по сравнению с "
         f"предыдущим кварталом, прежде всего благодаря {driver}.\n\n" if a else
         f"## Финансовые результаты\n\nВо втором квартале доходы достигли {f['rev']} млрд рублей, что на {f['pct']} % "
         "больше, чем в первом квартале.\n\n"),
        (f"## Сотрудники\n\nНа конец июня численность сотрудников составляла {f['staff']} человек, из них {f['rd']} % "
         "заняты в исследованиях и разработках.\n\n" if a else
         f"## Персонал\n\nК концу июня в штате работали {f['staff']} человек; с начала года наняли ещё "
         f"{f['hired']} работников.\n\n"),
        (f"## Новые площадки\n\nНовый {facility} в {site} начал работу в {f['month']}-м месяце года.\n\n" if a else
         f"## Инвестиции\n\nВ {f['month']}-м месяце в {site} открылся новый {facility}.\n\n"),
        (f"## Руководство\n\n{ceo} возглавляет компанию в должности генерального директора с {f['ceo_year']} "
         "года.\n\n" if a else
         f"## Управление\n\nСовет директоров назначил {ceo} генеральным директором в {f['ceo_year']} году.\n\n"),
        f"## Прогноз\n\nРуководство ожидает, что в третьем квартале выручка {'вырастет' if f['up'] else 'снизится'} "
        f"на {f['pct2']} %.\n",
    ]
    questions = [
        ("revenue", f"На сколько процентов выросли выручки {name} во втором квартале?" if a else
         f"Какие доходы получила {name} за квартал?"),
        ("staff", f"Сколько сотрудников работает в {name}?" if a else f"Какая численность персонала у {name}?"),
        ("site", f"Где находится новый {facility} {name}?" if a else f"В каком городе {name} открыла {facility}?"),
        ("chief", f"Кто генеральный директор {name}?" if a else f"Кто руководит компанией {name}?"),
    ]
    return sections, questions


def _tr(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name} 2023 İkinci Çeyrek Faaliyet Raporu\n\n{name}, merkezi {city} olan ve {founded} yılında kurulan bir "
        f"{industry}dir. Bu rapor 2023 yılının ikinci çeyreğindeki faaliyet sonuçlarını özetlemektedir.\n\n",
        (f"## Gelir\n\nBu çeyrekte satış gelirleri {f['rev']} milyar lira oldu ve bir önceki çeyreğe göre %{f['pct']} "
         f"arttı; artışın başlıca nedeni {driver} oldu.\n\n" if a else
         f"## Faaliyet sonuçları\n\nİkinci çeyrekte hasılat {f['rev']} milyar liraya ulaştı, ilk çeyreğe göre "
         f"%{f['pct']} yükseldi.\n\n"),
        (f"## Çalışanlar\n\nHaziran sonu itibarıyla toplam çalışan sayısı {f['staff']} kişiydi; bunların %{f['rd']}'i "
         "araştırma ve geliştirme bölümünde çalışıyor.\n\n" if a else
         f"## Personel\n\nHaziran sonunda şirkette {f['staff']} personel görev yapıyordu; yıl başından bu yana "
         f"{f['hired']} kişi işe alındı.\n\n"),
        (f"## Yeni tesisler\n\n{site}'daki yeni {facility} {f['month']}. ayda faaliyete geçti.\n\n" if a else
         f"## Yatırımlar\n\n{f['month']}. ayda {site}'da yeni bir {facility} açıldı.\n\n"),
        (f"## Yönetim\n\n{ceo}, {f['ceo_year']} yılından beri genel müdür olarak şirketi yönetiyor.\n\n" if a else
         f"## Kurumsal yönetim\n\nYönetim kurulu {ceo}'yu {f['ceo_year']} yılında genel müdürlüğe atadı.\n\n"),
        f"## Beklentiler\n\nYönetim, üçüncü çeyrekte gelirlerin %{f['pct2']} "
        f"{'artmasını' if f['up'] else 'azalmasını'} bekliyor.\n",
    ]
    questions = [
        ("revenue", f"{name}'ın ikinci çeyrek geliri yüzde kaç arttı?" if a else
         f"{name} hasılatı ne kadar yükseldi?"),
        ("staff", f"{name}'ta kaç çalışan var?" if a else f"{name} personel sayısı nedir?"),
        ("site", f"{name}'ın yeni {facility}sı nerede?" if a else f"{name} yeni {facility}yı hangi şehirde açtı?"),
        ("chief", f"{name}'ın genel müdürü kim?" if a else f"{name} şirketini kim yönetiyor?"),
    ]
    return sections, questions


def _hi(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name} – 2023 की दूसरी तिमाही की रिपोर्ट\n\n{name} {city} में मुख्यालय वाली एक {industry} है, जिसकी "
        f"स्थापना {founded} में हुई थी। यह रिपोर्ट 2023 की दूसरी तिमाही के कारोबारी नतीजों का सार है।\n\n",
        (f"## राजस्व\n\nइस तिमाही में राजस्व {f['rev']} करोड़ रुपये रहा और पिछली तिमाही की तुलना में {f['pct']}% बढ़ा, "
         f"मुख्य रूप से {driver} की वजह से।\n\n" if a else
         f"## कारोबारी नतीजे\n\nदूसरी तिमाही में कंपनी की आय {f['rev']} करोड़ रुपये तक पहुँची, जो पहली तिमाही से "
         f"{f['pct']}% अधिक है।\n\n"),
        (f"## कर्मचारी\n\nजून के अंत तक कर्मचारियों की कुल संख्या {f['staff']} थी, जिनमें से {f['rd']}% अनुसंधान और "
         "विकास में काम करते हैं।\n\n" if a else
         f"## कार्यबल\n\nजून के अंत में कंपनी में {f['staff']} लोग काम कर रहे थे; साल की शुरुआत से {f['hired']} नए लोग "
         "जुड़े।\n\n"),
        (f"## नई इकाइयाँ\n\n{site} में नया {facility} महीने {f['month']} में शुरू हुआ।\n\n" if a else
         f"## निवेश\n\nमहीने {f['month']} में {site} में एक नया {facility} खोला गया।\n\n"),
        (f"## प्रबंधन\n\n{ceo} {f['ceo_year']} से मुख्य कार्यकारी अधिकारी के रूप में कंपनी का नेतृत्व कर रहे हैं।\n\n"
         if a else
         f"## शासन\n\nनिदेशक मंडल ने {f['ceo_year']} में {ceo} को मुख्य कार्यकारी अधिकारी नियुक्त किया।\n\n"),
        f"## दृष्टिकोण\n\nप्रबंधन को उम्मीद है कि तीसरी तिमाही में राजस्व {f['pct2']}% "
        f"{'बढ़ेगा' if f['up'] else 'घटेगा'}।\n",
    ]
    questions = [
        ("revenue", f"{name} का दूसरी तिमाही का राजस्व कितना बढ़ा?" if a else f"{name} की आय कितने प्रतिशत बढ़ी?"),
        ("staff", f"{name} में कितने कर्मचारी हैं?" if a else f"{name} में कितने लोग काम करते हैं?"),
        ("site", f"{name} का नया {facility} कहाँ है?" if a else f"{name} ने नया {facility} किस शहर में खोला?"),
        ("chief", f"{name} के मुख्य कार्यकारी अधिकारी कौन हैं?" if a else f"{name} का नेतृत्व कौन करता है?"),
    ]
    return sections, questions


def _ar(org: tuple[str, ...], n: int, f: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    name, city, industry, founded, driver, facility, site, ceo = org
    a = n % 2 == 0
    sections = [
        f"# {name} – تقرير الربع الثاني من عام 2023\n\n{name} هي {industry} يقع مقرها الرئيسي في {city}، "
        f"وتأسست عام {founded}. يعرض هذا التقرير نتائج أعمال الربع الثاني من عام 2023.\n\n",
        (f"## الإيرادات\n\nبلغت الإيرادات في هذا الربع {f['rev']} مليون دولار، بزيادة قدرها {f['pct']}% مقارنةً "
         f"بالربع السابق، ويعود ذلك أساسًا إلى {driver}.\n\n" if a else
         f"## نتائج الأعمال\n\nحققت الشركة في الربع الثاني مبيعات بقيمة {f['rev']} مليون دولار، أي أعلى بنسبة "
         f"{f['pct']}% من الربع الأول.\n\n"),
        (f"## الموظفون\n\nبلغ العدد الإجمالي للموظفين في نهاية يونيو {f['staff']} موظفًا، يعمل {f['rd']}% منهم في البحث "
         "والتطوير.\n\n" if a else
         f"## القوى العاملة\n\nفي نهاية يونيو كان لدى الشركة {f['staff']} عاملًا، بعد توظيف {f['hired']} منذ بداية "
         "العام.\n\n"),
        (f"## المواقع الجديدة\n\nبدأ {facility} الجديد في {site} العمل في الشهر {f['month']}.\n\n" if a else
         f"## الاستثمارات\n\nافتُتح {facility} جديد في {site} في الشهر {f['month']}.\n\n"),
        (f"## الإدارة\n\nيشغل {ceo} منصب الرئيس التنفيذي منذ عام {f['ceo_year']}.\n\n" if a else
         f"## الحوكمة\n\nعيّن مجلس الإدارة {ceo} رئيسًا تنفيذيًا في عام {f['ceo_year']}.\n\n"),
        f"## التوقعات\n\nتتوقع الإدارة أن {'ترتفع' if f['up'] else 'تنخفض'} الإيرادات في الربع الثالث بنسبة "
        f"{f['pct2']}%.\n",
    ]
    questions = [
        ("revenue", f"كم زادت إيرادات {name} في الربع الثاني؟" if a else f"ما قيمة مبيعات {name} في الربع؟"),
        ("staff", f"كم عدد موظفي {name}؟" if a else f"كم عاملا لدى {name}؟"),
        ("site", f"أين يقع {facility} الجديد التابع لـ{name}؟" if a else f"في أي مدينة افتتحت {name} {facility}؟"),
        ("chief", f"من هو الرئيس التنفيذي لـ{name}؟" if a else f"من يدير {name}؟"),
    ]
    return sections, questions


_TURKISH_PLAIN = str.maketrans("ıİşŞğĞüÜöÖçÇ", "iIsSgGuUoOcC")


def without_turkish_letters(text: str) -> str:
    """As typed on a keyboard without a Turkish layout: dotless i as i, s, g, u, o and c without their marks."""
    return text.translate(_TURKISH_PLAIN)


WRITERS = {"zh": _zh, "ja": _ja, "de": _de, "vi": _vi, "ko": _ko, "ru": _ru, "tr": _tr, "hi": _hi, "ar": _ar}
TYPED_PLAIN = {"vi": without_diacritics, "tr": without_turkish_letters}
"""Languages whose questions are typed half without their marks, as people often type them."""
PARAPHRASES = {("zh", "chief"), ("hi", "chief")}
"""Questions of the second wording that share no content word with their answer (``CEO`` for ``首席执行官``, "who
leads" for "was appointed chief executive"): marked ``paraphrase``, no lexical match can find them."""
GOLD_SECTION = {"revenue": 1, "staff": 2, "site": 3, "chief": 4}


def build(language: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    documents, queries = [], []
    for n, org in enumerate(ORGS[language]):
        sections, questions = WRITERS[language](org, n, _facts(n))
        doc_id = f"{language}-{n:02d}"
        chunks = [{"id": f"{doc_id}-{k}", "text": text} for k, text in enumerate(sections)]
        documents.append({"id": doc_id, "text": "".join(sections), "chunks": chunks,
                          "metadata": {"language": language, "organisation": org[0]}})
        for kind, question in questions:
            plain = language in TYPED_PLAIN and (n + GOLD_SECTION[kind]) % 2 == 1
            queries.append({"query": TYPED_PLAIN[language](question).lower() if plain else question,
                            "gold_chunk_ids": [f"{doc_id}-{GOLD_SECTION[kind]}"], "kind": kind,
                            **({"typed_without_diacritics": True} if plain else {}),
                            **({"paraphrase": True} if (language, kind) in PARAPHRASES and n % 2 else {})})
    return documents, queries


def rendered() -> dict[str, str]:
    """Each file of the set as its text."""
    files = {}
    for language in LANGUAGES:
        documents, queries = build(language)
        files[f"{language}_documents.jsonl"] = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents)
        files[f"{language}_queries.jsonl"] = "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries)
    return files


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (OUT / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(LANGUAGES) * 2} files to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
